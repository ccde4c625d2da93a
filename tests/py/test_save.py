"""torch.save / torch.load and pickle of rgpu tensors, parameters, state_dicts
and whole modules, against the values saved (tensor.RemoteTensor.__reduce_ex__)."""
import copy
import io
import pickle

import torch

import rgpu  # noqa: F401


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_state_dict_roundtrip_weights_only():
    m = _model().to("rgpu")
    m(torch.randn(5, 3).to("rgpu"))                 # running stats change
    sd = m.state_dict()
    back = _roundtrip(sd)                           # torch.load's default: weights_only=True
    assert list(back) == list(sd)
    for k, v in sd.items():
        assert back[k].device.type == "rgpu" and back[k].dtype == v.dtype and back[k].shape == v.shape
        assert torch.equal(back[k].cpu(), v.cpu()), k
    cpu = _roundtrip(sd, map_location="cpu")
    for k, v in sd.items():
        assert cpu[k].device.type == "cpu" and torch.equal(cpu[k], v.cpu()), k
    mc = _model()
    mc.load_state_dict(cpu)
    x = torch.randn(6, 3)
    torch.testing.assert_close(m.eval()(x.to("rgpu")).cpu(), mc.eval()(x))


def test_whole_module_and_optimizer_roundtrip():
    m = _model().to("rgpu")
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    m(torch.randn(5, 3).to("rgpu")).sum().backward()
    opt.step()
    m2 = _roundtrip(m, weights_only=False)
    assert all(isinstance(p, torch.nn.Parameter) and p.device.type == "rgpu" for p in m2.parameters())
    x = torch.randn(4, 3).to("rgpu")
    assert torch.equal(m.eval()(x).cpu(), m2.eval()(x).cpu())
    osd = _roundtrip(opt.state_dict())
    for s, s2 in zip(opt.state_dict()["state"].values(), osd["state"].values()):
        for k in s:
            assert torch.equal(torch.as_tensor(s[k]).cpu(), torch.as_tensor(s2[k]).cpu()), k


def test_views_params_and_pickle():
    t = torch.arange(12.).to("rgpu").view(3, 4)[:, 1::2].t()
    assert torch.equal(_roundtrip(t).cpu(), t.cpu())
    p = torch.nn.Parameter(torch.ones(2).to("rgpu"))
    q = _roundtrip([p])[0]
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.device.type == "rgpu"
    r = pickle.loads(pickle.dumps(torch.tensor([1, 2, 3]).to("rgpu")))
    assert r.tolist() == [1, 2, 3] and r.dtype == torch.int64
    c = copy.deepcopy(p)
    assert torch.equal(c.cpu(), p.cpu()) and c is not p
