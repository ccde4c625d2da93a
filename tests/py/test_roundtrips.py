"""Round trips: new data is pushed before the chunk that names it, so the
server never has to ask for it (NEED) on the critical path. Counted by
rgpu.stats()["round_trips"] (the handshake, waits, the server's NEEDs,
reconnects), each case in a child process against its own embedded server."""
import json
import os
import subprocess
import sys
import textwrap

TORCHHOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook")


def run(code):
    e = dict(os.environ, PYTHONPATH=TORCHHOOK)
    e.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


LOOP = """
import json, torch, torch.nn as nn, torch.nn.functional as F, rgpu
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
ref.load_state_dict(model.state_dict())
model = model.to("rgpu")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
x0, y0 = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
rt, losses, refl = [], [], []
for i in range({steps}):
    x, y = (torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) if {new} else (x0, y0)
    loss = F.mse_loss(model(x.to("rgpu")), y.to("rgpu"))
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    rl = F.mse_loss(ref(x), y)
    ropt.zero_grad(); rl.backward(); ropt.step()
    refl.append(rl.item())
    rt.append(rgpu.stats()["round_trips"])
s = rgpu.stats()
print(json.dumps({{"rt": rt, "losses": losses, "ref": refl, "blobs_sent": s["blobs_sent"],
                  "deduped": s["blobs_deduped"]}}))
"""


def test_new_batch_every_step_costs_one_round_trip():
    r = run(LOOP.format(steps=20, new=True))
    per_step = (r["rt"][-1] - r["rt"][0]) / 19
    assert per_step <= 1.05, r["rt"]                         # the .item(); no NEED for the batch
    for a, b in zip(r["losses"], r["ref"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (a, b)
    assert r["blobs_sent"] >= 2 * 20                         # every new batch's bytes went (pushed)


def test_the_same_batch_is_sent_once():
    r = run(LOOP.format(steps=10, new=False))
    assert (r["rt"][-1] - r["rt"][0]) / 9 <= 1.05, r["rt"]
    assert r["deduped"] >= 2 * 9, r                          # later steps name the batch by hash only
    for a, b in zip(r["losses"], r["ref"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (a, b)


def test_model_upload_and_first_step_are_few_round_trips():
    r = run("""
        import json, torch, torch.nn as nn, rgpu
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(20)])    # 40 parameters
        ref = [p.detach().clone() for p in model.parameters()]
        model = model.to("rgpu")
        out = model(torch.ones(2, 64).to("rgpu")).sum().item()
        back = [p.cpu() for p in model.parameters()]
        s = rgpu.stats()
        print(json.dumps({"rt_after_step": s["round_trips"] - len(back), "equal": all(torch.equal(a, b) for a, b in zip(ref, back))}))
    """)
    assert r["equal"]
    assert r["rt_after_step"] <= 3, r                        # handshake + the .item(); not one per parameter
