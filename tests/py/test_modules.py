"""PyTorch modules on rgpu against the CPU: recurrent nets
with packed sequences, the fused transformer fast path (and TransformerEncoder's
nested-tensor path), MultiheadAttention, weight_norm, rrelu, batch norm's saved
statistics. Each trains a few optimizer steps from the same initial weights on
both devices (losses and parameters equal within tolerance) or compares eval /
no_grad outputs."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import rgpu  # noqa: F401  (registers the device)

DEV = "rgpu"


def _close(a, b, tol=1e-4):
    torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=tol, atol=tol)


def _train_both(model, step, n_steps=3, lr=0.1, tol=1e-4):
    """Trains model on the CPU and a copy on rgpu with SGD; step(m, device)
    returns the loss. Losses and parameters must agree."""
    md = copy.deepcopy(model).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    optd = torch.optim.SGD(md.parameters(), lr=lr)
    for _ in range(n_steps):
        for m, o, dev in ((model, opt, "cpu"), (md, optd, DEV)):
            o.zero_grad()
            loss = step(m, dev)
            loss.backward()
            o.step()
            if dev == "cpu":
                lc = loss.detach()
            else:
                _close(lc, loss, tol)
    for (n, p), (_, q) in zip(model.named_parameters(), md.named_parameters()):
        _close(p, q, tol)
    return md


# --- recurrent nets ----------------------------------------------------------------

_RNNS = {
    "lstm": lambda **k: nn.LSTM(**k),
    "gru": lambda **k: nn.GRU(**k),
    "rnn_tanh": lambda **k: nn.RNN(nonlinearity="tanh", **k),
    "rnn_relu": lambda **k: nn.RNN(nonlinearity="relu", **k),
}


@pytest.mark.parametrize("kind", list(_RNNS))
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_rnn_trains_like_cpu(kind, packed):
    torch.manual_seed(0)
    rnn = _RNNS[kind](input_size=4, hidden_size=5, num_layers=2, bidirectional=True, batch_first=True)
    head = nn.Linear(10, 3)
    model = nn.ModuleList([rnn, head])
    x = torch.randn(3, 6, 4)
    lengths = torch.tensor([4, 6, 2])          # unsorted: pack_padded_sequence sorts them
    y = torch.randint(0, 3, (3, 6))

    def step(m, dev):
        xd = x.to(dev)
        if packed:
            p = pack_padded_sequence(xd, lengths, batch_first=True, enforce_sorted=False)
            out, _ = m[0](p)
            out, lens = pad_packed_sequence(out, batch_first=True, total_length=6)
            assert lens.device.type == "cpu"
        else:
            out, _ = m[0](xd)
        return F.cross_entropy(m[1](out).flatten(0, 1), y.to(dev).flatten())
    _train_both(model, step)


@pytest.mark.parametrize("kind", list(_RNNS))
def test_rnn_dropout_eval_and_no_grad(kind):
    """dropout between layers: eval mode outputs equal the CPU's; training mode
    runs (its masks come from rgpu's own generator)."""
    torch.manual_seed(0)
    rnn = _RNNS[kind](input_size=4, hidden_size=5, num_layers=3, dropout=0.5)
    rd = copy.deepcopy(rnn).to(DEV)
    x = torch.randn(7, 2, 4)
    rnn.eval()
    rd.eval()
    with torch.no_grad():
        out, h = rnn(x)
        outd, hd = rd(x.to(DEV))
    _close(out, outd)
    _close(h[0] if isinstance(h, tuple) else h, hd[0] if isinstance(hd, tuple) else hd)
    rd.train()
    outd, _ = rd(x.to(DEV))
    outd.sum().backward()
    assert torch.isfinite(rd.weight_ih_l0.grad.cpu()).all()


def test_lstm_packed_costs_few_records_and_no_wait():
    """A packed LSTM step is a handful of records (one cell record forward and
    one backward, ~6 forward and ~18 backward in all) and nothing waits. FREE
    records, which go out before each record that allocates, are not counted."""
    torch.manual_seed(0)
    rnn = nn.LSTM(4, 5, batch_first=True).to(DEV)
    x = torch.randn(3, 20, 4, device=DEV)
    lengths = torch.tensor([20, 15, 9])
    rgpu.synchronize()
    s0 = rgpu.stats()
    out, _ = rnn(pack_padded_sequence(x, lengths, batch_first=True))
    pad_packed_sequence(out, batch_first=True)[0].sum().backward()
    s1 = rgpu.stats()
    assert s1["waits"] == s0["waits"]
    assert (s1["ops"] - s1["free_records"]) - (s0["ops"] - s0["free_records"]) < 20 * 30
    d = s1["decomposed"]
    assert d.get("aten._pack_padded_sequence.default", 0) >= 1


# --- transformer fast paths ----------------------------------------------------------

def _encoder(norm_first=False, activation="relu"):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True, norm_first=norm_first,
                                       activation=activation)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_eval_no_grad(norm_first, activation):
    enc = _encoder(norm_first, activation)
    encd = copy.deepcopy(enc).to(DEV)
    x = torch.randn(3, 5, 8)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        _close(enc(x), encd(x.to(DEV)))
        # the nested-tensor path (CPU's output is zero at the padding)
        _close(enc(x, src_key_padding_mask=mask), encd(x.to(DEV), src_key_padding_mask=mask.to(DEV)))
        _close(enc(x, mask=causal), encd(x.to(DEV), mask=causal.to(DEV)))
        layer, layerd = enc.layers[0], encd.layers[0]
        _close(layer(x, src_key_padding_mask=mask), layerd(x.to(DEV), src_key_padding_mask=mask.to(DEV)))
    counts = rgpu.stats()["decomposed"]
    assert counts.get("aten._transformer_encoder_layer_fwd.default", 0) > 0


def test_transformer_encoder_trains_like_cpu():
    enc = _encoder()
    enc.train()
    for layer in enc.layers:
        layer.dropout.p = layer.dropout1.p = layer.dropout2.p = 0.0
        layer.self_attn.dropout = 0.0       # attention dropout draws from rgpu's own generator
    x = torch.randn(2, 4, 8)
    _train_both(enc, lambda m, dev: m(x.to(dev)).pow(2).mean())


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_eval_no_grad(need_weights, average):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    md = copy.deepcopy(m).to(DEV)
    q = torch.randn(2, 4, 8)
    kpm = torch.tensor([[False] * 4, [False, False, True, True]])
    with torch.no_grad():
        for kw in ({}, {"key_padding_mask": kpm}):
            a = m(q, q, q, need_weights=need_weights, average_attn_weights=average, **kw)
            kwd = {k: v.to(DEV) for k, v in kw.items()}
            qd = q.to(DEV)
            b = md(qd, qd, qd, need_weights=need_weights, average_attn_weights=average, **kwd)
            _close(a[0], b[0])
            if need_weights:
                _close(a[1], b[1])
            else:
                assert a[1] is None and b[1] is None


# --- weight_norm, rrelu, batch norm -------------------------------------------------------

@pytest.mark.parametrize("form", ["hook", "parametrization"])
def test_weight_norm_trains_like_cpu(form):
    """wav2vec2's positional conv: weight_norm over dim 2 of a Conv1d."""
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 6, 3, padding=1)
    if form == "hook":
        conv = nn.utils.weight_norm(conv, dim=2)
    else:
        conv = nn.utils.parametrizations.weight_norm(conv, dim=2)
    x = torch.randn(2, 4, 7)
    if form == "hook":      # the hook's computed weight can't be swapped by .to(): build on rgpu
        torch.manual_seed(0)
        convd = nn.utils.weight_norm(nn.Conv1d(4, 6, 3, padding=1).to(DEV), dim=2)
        convd.load_state_dict(conv.state_dict())
        opt = torch.optim.SGD(conv.parameters(), lr=0.1)
        optd = torch.optim.SGD(convd.parameters(), lr=0.1)
        for _ in range(3):
            for m, o, dev in ((conv, opt, "cpu"), (convd, optd, DEV)):
                o.zero_grad()
                loss = m(x.to(dev)).pow(2).mean()
                loss.backward()
                o.step()
        for p, q in zip(conv.parameters(), convd.parameters()):
            _close(p, q)
    else:
        _train_both(conv, lambda m, dev: m(x.to(dev)).pow(2).mean())
    assert rgpu.stats()["decomposed"].get("aten._weight_norm_interface_backward.default", 0) > 0


def test_rrelu():
    torch.manual_seed(0)
    x = torch.randn(200)
    xd = x.to(DEV)
    _close(F.rrelu(x, 0.1, 0.3, training=False), F.rrelu(xd, 0.1, 0.3, training=False), 0)
    xr = xd.clone().requires_grad_()
    y = F.rrelu(xr, 0.1, 0.3, training=True)
    y.sum().backward()
    y, g = y.detach().cpu(), xr.grad.cpu()
    pos = x > 0
    assert torch.equal(y[pos], x[pos]) and torch.equal(g[pos], torch.ones_like(g[pos]))
    slope = y[~pos] / x[~pos]
    assert (slope >= 0.1 - 1e-6).all() and (slope <= 0.3 + 1e-6).all()
    torch.testing.assert_close(g[~pos], slope)
    assert slope.std() > 0          # drawn, not fixed
    m = nn.RReLU(0.1, 0.3).eval()
    _close(m(x), m.to(DEV)(xd), 0)


def test_batch_norm_saved_stats_shapes():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 4)
    w, b, rm, rv = torch.randn(2), torch.randn(2), torch.zeros(2), torch.ones(2)
    for training in (False, True):
        for op in (torch.ops.aten.native_batch_norm.default, torch.ops.aten._native_batch_norm_legit.default):
            r = op(x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5)
            rd = op(x.to(DEV), w.to(DEV), b.to(DEV), rm.to(DEV), rv.to(DEV), training, 0.1, 1e-5)
            for a, c in zip(r, rd):
                assert a.shape == c.shape
                _close(a, c)
    bn = nn.BatchNorm1d(2).eval()
    _train_both(bn, lambda m, dev: m(x.to(dev)).pow(2).mean())
