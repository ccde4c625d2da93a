"""torch.compile(model, backend="rgpu") on the models people compile first:
transformers GPT-2, Llama, Qwen2 and T5 built from tiny configs (no weights
downloaded). Compiled training on rgpu equals eager training on the CPU, with
no eager fallback and a handful of records per step; compiled generation gives
eager's tokens. Crashes seen on these models are regression tests here: rgpu's own
bookkeeping traced by dynamo (GPT-2), storage resize on the rgpu device
(Llama, Qwen2), torch.tensor(..., device="rgpu") under fake tensors (T5), and
a failed compile that used to leave state behind for the next model."""
import copy
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # configs only: never the network

import pytest
import torch
import transformers

import rgpu

DEV = "rgpu"
V = 100                 # vocabulary of every tiny model


from compile_util import cc, fresh_dynamo, rgpu_warnings  # noqa: E402,F401  (fresh_dynamo: autouse)


def tiny(name):
    """A transformers model of two layers, hidden 32, vocabulary 100, seed 0."""
    T = transformers
    torch.manual_seed(0)
    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                              bos_token_id=0, eos_token_id=V - 1))
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=2, num_attention_heads=2,
                                                num_key_value_heads=1, max_position_embeddings=32,
                                                bos_token_id=0, eos_token_id=V - 1, pad_token_id=0))
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                num_hidden_layers=2, num_attention_heads=2,
                                                num_key_value_heads=1, max_position_embeddings=32,
                                                bos_token_id=0, eos_token_id=V - 1, pad_token_id=0))
    if name == "t5":
        return T.T5ForConditionalGeneration(T.T5Config(vocab_size=V, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                                       num_heads=2, dropout_rate=0.0, decoder_start_token_id=0,
                                                       pad_token_id=0, eos_token_id=V - 1))
    raise ValueError(name)


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, V, (2, 8), generator=g) for _ in range(n)]


def lm_loss(fwd, b):
    return fwd(input_ids=b, labels=b).loss


def train(model, dev, compiled, data, lr=0.1, loss_of=lm_loss):
    """SGD steps on `data` (loss_of(forward, batch): by default language
    modelling, labels are the inputs); model forward and optimizer step
    compiled when `compiled`. Returns the losses, per step (records, CALL
    records, waits, chunks), and the model."""
    model = model.to(dev)
    # (SGD: Adam would turn the rounding noise of gradients that are zero in
    # exact arithmetic, like GPT-2's key biases', into full-size steps)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=True)
    fwd = torch.compile(model, backend="rgpu") if compiled else model

    def step():
        opt.step()
    step = torch.compile(step, backend="rgpu") if compiled else step
    losses, per_step = [], []
    for b in data:
        s0 = rgpu.stats()
        b = b.to(dev)
        loss = loss_of(fwd, b)
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        s1 = rgpu.stats()
        per_step.append((s1["ops"] - s0["ops"], s1["compile"]["calls"] - s0["compile"]["calls"],
                         s1["waits"] - s0["waits"], s1["chunks"] - s0["chunks"]))
    return losses, per_step, model


# --- training ---------------------------------------------------------------------------

def train_cpu_and_compiled(name, n_batches):
    """Model `name` trained on n_batches batches eagerly on the CPU, then
    compiled on rgpu: (train()'s result for each, rgpu's warnings during the
    compiled run, the compile counters before it)."""
    base = tiny(name)
    data = batches(n_batches)
    ref = train(copy.deepcopy(base), "cpu", False, data)
    c0 = cc()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = train(copy.deepcopy(base), DEV, True, data)
    return ref, got, rgpu_warnings(rec), c0


def assert_steady_records(per_step):
    """After warm-up a step is the batch's upload (one UPLOAD), the graphs'
    CALLs, the loss read and FREE batches: at most two records per graph call
    besides FREEs. The frees dropped since the last record go out before each
    record that allocates or waits (FORMAT.md §4.1), and with each chunk (the
    sender closes one RGPU_CHUNK_MS after its first record, so timing decides
    how many close mid-step): at most one FREE before each other record, and
    one per chunk. per_step: (ops, calls, waits, chunks) of each step."""
    for ops, calls, _, chunks in per_step[2:]:
        assert calls >= 3 and ops - chunks <= 4 * calls, per_step


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "t5"])
def test_compiled_training_equals_eager_cpu(name):
    (ref, _, ref_m), (got, per_step, got_m), warned, c0 = train_cpu_and_compiled(name, 5)
    c1 = cc()
    assert warned == []
    for k in ("eager_graphs", "eager_calls", "eager_frames"):
        assert c1[k] == c0[k], (k, c0, c1)
    assert c1["templates"] > c0["templates"]
    for a, b in zip(got, ref):
        assert abs(a - b) <= 1e-5 * abs(b), (got, ref)
    for (n, p), q in zip(got_m.named_parameters(), ref_m.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5, msg=n)
    assert_steady_records(per_step)
    for _, _, waits, _ in per_step[2:]:
        assert waits == 1, per_step


# --- generation -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_compiled_generate_gives_eager_tokens(name):
    prompt = torch.randint(1, V, (2, 5), generator=torch.Generator().manual_seed(3))
    ref = tiny(name).eval().generate(prompt, max_new_tokens=8, do_sample=False)
    m = tiny(name).eval().to(DEV)
    m.forward = torch.compile(m.forward, backend="rgpu")
    c0 = cc()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = m.generate(prompt.to(DEV), max_new_tokens=8, do_sample=False)
    c1 = cc()
    assert torch.equal(got.cpu(), ref), (got.cpu(), ref)
    # the growing cache makes dynamo trace with dynamic shapes: rgpu says once
    # that it captures a template per shape, and runs nothing eagerly
    w = rgpu_warnings(rec)
    assert len(w) == 1 and "captured once per input shape" in w[0], w
    assert c1["eager_calls"] == c0["eager_calls"] and c1["eager_frames"] == c0["eager_frames"]
    assert c1["templates"] - c0["templates"] <= 10
    # the same shapes again: the templates are reused, no warning
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        again = m.generate(prompt.to(DEV), max_new_tokens=8, do_sample=False)
    assert torch.equal(again.cpu(), ref)
    assert rgpu_warnings(rec) == [] and cc()["templates"] - c1["templates"] <= 2


# --- the crash cases ----------------------------------------------------------------------

def test_views_and_graph_breaks_never_trace_rgpu_bookkeeping():
    """GPT-2's crash: between graphs (after a graph break) eager ops run rgpu's
    dispatch and record_view, and dynamo traced those frames. Views inside a
    graph are ops of its template; views between graphs are recorded eagerly."""
    def f(x, w):
        y = (x @ w).view(2, 3, 4).transpose(1, 2)
        z = y[:, 1:, :2].unsqueeze(0).expand(2, 2, 3, 2)
        torch._dynamo.graph_break()
        v = z.permute(3, 2, 1, 0).reshape(-1)[::2]        # eager: views of rgpu tensors
        return (v * 2).sum() + z.mean(), y.t() if y.dim() == 2 else y.narrow(1, 0, 2)

    x, w = torch.randn(6, 5), torch.randn(5, 4)
    ref = f(x, w)
    cf = torch.compile(f, backend="rgpu")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(2):
            got = cf(x.to(DEV), w.to(DEV))
            for a, b in zip(got, ref):
                torch.testing.assert_close(a.cpu(), b)
    assert rgpu_warnings(rec) == []

    def g(x):
        return x.view(-1)[2:8].view(2, 3).t().contiguous() + x.diagonal().sum()
    cg = torch.compile(g, backend="rgpu", fullgraph=True)
    x = torch.randn(4, 4)
    cg(x.to(DEV))
    s0 = rgpu.stats()
    out = cg(x.to(DEV))
    s1 = rgpu.stats()
    torch.testing.assert_close(out.cpu(), g(x))
    assert s1["compile"]["calls"] - s0["compile"]["calls"] == 1
    assert s1["ops"] - s0["ops"] <= 3          # the upload, one CALL, maybe a FREE: no ALIAS records


def test_tensor_constructor_inside_a_compiled_region():
    """T5, GPT-2, Llama: transformers' cache does torch.tensor([], device=...)
    while dynamo traces; under fake tensors torch builds a real rgpu tensor
    and lift_fresh must turn it into a fake (was: RuntimeError when making
    fake tensor call / not a view of its input)."""
    def f(x):
        k = torch.tensor([], dtype=x.dtype, device=x.device)
        c = torch.tensor([1.0, 2.0, 3.0], device=x.device)
        one = torch.tensor([[0.5]], device=x.device)
        big = torch.tensor([[i, -i] for i in range(20)], dtype=torch.int64, device=x.device)
        return torch.cat([k, x.flatten()]) * 2, x + c, x * one, big.sum(0) + x.shape[0]

    x = torch.randn(2, 3)
    ref = f(x)
    cf = torch.compile(f, backend="rgpu", fullgraph=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(2):
            for a, b in zip(cf(x.to(DEV)), ref):
                torch.testing.assert_close(a.cpu(), b)
    assert rgpu_warnings(rec) == []


def test_fake_tensor_of_an_empty_rgpu_tensor():
    """Llama/Qwen2's crash: fakeifying an empty rgpu tensor resizes its fake's
    storage to 0 bytes, which for PrivateUse1 asked for resizePrivateUse1Bytes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    e = torch.empty(0, device=DEV)
    with FakeTensorMode() as mode:
        f = mode.from_tensor(e)
        assert f.shape == (0,) and f.device == e.device
        assert f.untyped_storage().nbytes() == 0
    e.untyped_storage().resize_(0)          # the same size: nothing to do
    assert e.cpu().shape == (0,)


def test_resize_tensor_and_storage():
    # shrink: a view of the same storage
    x = torch.arange(12.0, device=DEV)
    assert x.resize_(2, 3) is x and x.shape == (2, 3)
    torch.testing.assert_close(x.cpu(), torch.arange(6.0).view(2, 3))
    # grow: a new storage holding the old bytes first
    x = torch.arange(6.0, device=DEV)
    x.resize_(3, 4)
    assert x.shape == (3, 4) and x.stride() == (4, 1)
    torch.testing.assert_close(x.view(-1)[:6].cpu(), torch.arange(6.0))
    x.fill_(1.5)
    torch.testing.assert_close(x.cpu(), torch.full((3, 4), 1.5))
    # memory format
    y = torch.zeros(2, 3, 4, 5, device=DEV).resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert y.stride() == torch.empty(2, 3, 4, 5).resize_(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    # untyped_storage().resize_: more bytes, the data kept
    z = torch.arange(4, dtype=torch.float32, device=DEV)
    s = z.untyped_storage().resize_(64)
    assert s.nbytes() == 64 and z.untyped_storage().nbytes() == 64
    torch.testing.assert_close(z.cpu(), torch.arange(4.0))
    torch.testing.assert_close((z + 1).cpu(), torch.arange(4.0) + 1)
    # fewer bytes than the tensor spans, or a reallocation other views would miss: refused
    with pytest.raises(NotImplementedError, match="fewer bytes"):
        z.untyped_storage().resize_(8)
    w = torch.arange(4.0, device=DEV)
    v = w[1:]
    with pytest.raises(NotImplementedError, match="other tensors"):
        w.resize_(8, 8)
    torch.testing.assert_close(v.cpu(), torch.arange(1.0, 4.0))


def test_storage_resize_inside_a_compiled_function():
    """dynamo makes untyped_storage().resize_ an inductor.resize_storage_bytes_
    node: the graph runs eagerly (it rebinds its input), after one warning."""
    def f(x):
        y = x * 2
        x.untyped_storage().resize_(x.numel() * x.element_size() * 2)
        return y + 1

    x = torch.arange(4.0)
    xr = x.to(DEV)
    with pytest.warns(UserWarning, match="resizes a storage"):
        out = torch.compile(f, backend="rgpu")(xr)
    torch.testing.assert_close(out.cpu(), x * 2 + 1)
    assert xr.untyped_storage().nbytes() == 32
    torch.testing.assert_close(xr.cpu(), x)


def test_gradient_that_is_the_seed_is_not_shared():
    """d(loss)/d(b) for loss = ... + b is the seed gradient itself: the compiled
    backward returns the tensor it was given, not the shared constant it binds
    in its place (which a .grad kept and zeroed in place, zero_grad without
    set_to_none, or a hook writing its argument would change)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))
            self.b = torch.nn.Parameter(torch.tensor(0.5))

        def forward(self, x):
            return (x * self.w).sum() + self.b

    torch.manual_seed(0)
    base = M()
    xs = [torch.randn(3) for _ in range(4)]

    def run(model, dev, compiled):
        model = model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        f = torch.compile(model, backend="rgpu") if compiled else model
        out = []
        for x in xs:
            loss = f(x.to(dev))
            loss.backward()
            out.append((loss.item(), model.b.grad.item(), model.w.grad.cpu().clone()))
            opt.step()
            opt.zero_grad(set_to_none=False)
        return out

    ref = run(copy.deepcopy(base), "cpu", False)
    got = run(copy.deepcopy(base), DEV, True)
    for (la, ba, wa), (lb, bb, wb) in zip(got, ref):
        assert abs(la - lb) <= 1e-5 * abs(lb) and ba == bb == 1.0
        torch.testing.assert_close(wa, wb)


# --- failures: eager with one warning, nothing left behind ------------------------------------

def _fn(x, w):
    return torch.tanh(x @ w).sum(1)


def _check_eager_result(cf):
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    for _ in range(3):
        torch.testing.assert_close(cf(x.to(DEV), w.to(DEV)).cpu(), _fn(x, w))


def test_failed_compiles_fall_back_once_and_leave_no_state(monkeypatch):
    """A failure while dynamo traces (here: fakeifying an rgpu input), in
    aot_autograd, or in the backend runs that frame (or graph) eagerly after
    one warning naming the cause; fullgraph=True raises instead; the next
    model in the process compiles normally (was: AttributeError '_m')."""
    from rgpu import tensor as rt

    def broken_unflatten(inner, ctx, outer_size, outer_stride):
        raise RuntimeError("injected unflatten failure")
    monkeypatch.setattr(rt, "_unflatten", broken_unflatten)
    c0 = cc()
    with pytest.warns(UserWarning, match=r"rgpu: torch.compile could not compile _fn .*injected unflatten"):
        _check_eager_result(torch.compile(_fn, backend="rgpu"))
    assert cc()["eager_frames"] == c0["eager_frames"] + 1
    torch._dynamo.reset()
    def fn2(x, w):
        return _fn(x, w) * 2
    with pytest.raises(Exception, match="injected unflatten failure"):
        torch.compile(fn2, backend="rgpu", fullgraph=True)(torch.ones(4, 3, device=DEV), torch.ones(3, 5, device=DEV))
    monkeypatch.undo()
    torch._dynamo.reset()

    import torch._functorch.aot_autograd as aot
    from rgpu import compile as rc

    def broken(what):
        def fail(*a, **k):
            raise RuntimeError(f"injected {what} failure")
        return fail
    for module, name, what, want in [
            (aot, "aot_module_simplified", "aot", "aot_autograd failed: RuntimeError: injected aot failure"),
            (rc, "_lift_attrs", "backend", "injected backend failure")]:
        monkeypatch.setattr(module, name, broken(what))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            _check_eager_result(torch.compile(_fn, backend="rgpu"))
        w = rgpu_warnings(rec)
        assert len(w) == 1 and want in w[0], w
        monkeypatch.undo()
        torch._dynamo.reset()

    # nothing left behind: a model compiles and trains like the CPU
    assert not rt._HIDE_UNFLATTEN[0] and not rt.PENDING
    (ref, _, _), (got, _, _), warned, c1 = train_cpu_and_compiled("gpt2", 3)
    assert warned == []
    assert cc()["eager_frames"] == c1["eager_frames"] and cc()["templates"] > c1["templates"]
    for a, b in zip(got, ref):
        assert abs(a - b) <= 1e-5 * abs(b), (got, ref)


def test_one_failing_model_does_not_stop_the_next():
    """A frame that failed for one model object runs eagerly for that object
    only: transformers' forward wrapper is one code object for every model."""
    from rgpu import compile as rc
    data = batches(2)
    first = tiny("llama")
    orig = rc._lift_attrs
    calls = []

    def failing_once(gm):
        if not calls:
            calls.append(1)
            raise RuntimeError("injected first-model failure")
        return orig(gm)
    rc._lift_attrs = failing_once
    try:
        with pytest.warns(UserWarning, match="injected first-model failure"):
            fm = torch.compile(first.to(DEV), backend="rgpu")
            l1 = [fm(input_ids=b.to(DEV), labels=b.to(DEV)).loss.item() for b in data]
    finally:
        rc._lift_attrs = orig
    ref = [tiny("llama")(input_ids=b, labels=b).loss.item() for b in data]
    for a, b in zip(l1, ref):
        assert abs(a - b) <= 1e-5 * abs(b)
    second = torch.compile(tiny("qwen2").to(DEV), backend="rgpu")
    ref2 = [tiny("qwen2")(input_ids=b, labels=b).loss.item() for b in data]
    c0 = cc()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        l2 = [second(input_ids=b.to(DEV), labels=b.to(DEV)).loss.item() for b in data]
    assert rgpu_warnings(rec) == []
    assert cc()["templates"] > c0["templates"] and cc()["eager_frames"] == c0["eager_frames"]
    for a, b in zip(l2, ref2):
        assert abs(a - b) <= 1e-5 * abs(b)


# --- torch.nn recurrent models ----------------------------------------------------------------

class _Seq(torch.nn.Module):
    """Embedding, a two-layer recurrent net, a linear head; cross-entropy loss."""

    def __init__(self, rnn):
        super().__init__()
        self.e = torch.nn.Embedding(V, 8)
        self.rnn = rnn(8, 16, num_layers=2, batch_first=True)
        self.h = torch.nn.Linear(16, V)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.h(self.rnn(self.e(x))[0]).flatten(0, 1), y.flatten())


@pytest.mark.parametrize("rnn", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
def test_recurrent_nets_eager_and_compiled_equal_cpu(rnn):
    """nn.LSTM and nn.GRU on rgpu run the fused cells of a GPU (decomposed in
    decomp.py); compiled, dynamo traces them into the graph (allow_rnn for
    rgpu's frames), so a step is a few CALLs, not ~900 records."""
    torch.manual_seed(0)
    base = _Seq(rnn)
    data = batches(5)

    def run(model, dev, compiled):
        return train(model, dev, compiled, data, lr=0.5, loss_of=lambda f, b: f(b, b))

    ref, _, ref_m = run(copy.deepcopy(base), "cpu", False)
    eager, _, eager_m = run(copy.deepcopy(base), DEV, False)
    c0 = cc()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got, per_step, got_m = run(copy.deepcopy(base), DEV, True)
    c1 = cc()
    assert rgpu_warnings(rec) == []
    for k in ("eager_graphs", "eager_calls", "eager_frames"):
        assert c1[k] == c0[k], (k, c0, c1)
    for a, b, c in zip(got, eager, ref):
        assert abs(a - c) <= 1e-5 * abs(c) and abs(b - c) <= 1e-5 * abs(c), (got, eager, ref)
    for (n, p), q, r in zip(got_m.named_parameters(), eager_m.parameters(), ref_m.parameters()):
        torch.testing.assert_close(p.cpu(), r, rtol=1e-4, atol=1e-5, msg=n)
        torch.testing.assert_close(q.cpu(), r, rtol=1e-4, atol=1e-5, msg=n)
    assert_steady_records(per_step)
