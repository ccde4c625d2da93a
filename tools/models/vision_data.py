"""A decode-free vision loader whose images never cross the link: an N x C x
H x W uint8 array and N int64 labels packed in server files (pack()), each
batch drawn, cropped, flipped and normalized on the server.

    pack(folder, images, labels)    images.u8, labels.i64 and meta.json in folder
    ServerImages("NAME/rel/folder", mean, std, pad)
        .draw(B, generator)         the batch's random numbers, drawn on the CPU:
                                    indices, crop offsets (dy, dx) in [0, 2 pad],
                                    a horizontal-flip mask
        .batch(draws)               (x float32 B x C x H x W normalized, y int64 B)
                                    on rgpu: B x 4 small numbers go up, no image byte
    augment(images, labels, idx, dy, dx, flip, mean, std, pad)
                                    the batch computation itself, on any device: the
                                    images gathered, zero-padded by pad and cropped
                                    back to H x W at (dy, dx) by one advanced index
                                    (no loop over samples), the crop's columns
                                    reversed where flip is set (torch.where), to
                                    float, / 255, (x - mean) / std per channel

    python3 tools/models/vision_data.py --demo [--steps 10]
        packs a synthetic 16 x 16 dataset (models.data.images) into a temporary
        folder, exposes it to the embedded server (RGPU_REMOTE_DATA) and trains
        models.cnn's ResNetSmall on it, printing each step's loss and client
        bytes sent; with RGPU_SERVER set, --path NAME/folder names a folder the
        server already exposes, packed there with --pack DIR.
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F


def pack(folder, images, labels):
    """Write uint8 images (N, C, H, W) and int64 labels (N,) as the loader reads them."""
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError(f"pack: images must be uint8 (N, C, H, W), not {images.dtype} {tuple(images.shape)}")
    if labels.shape != (images.shape[0],):
        raise ValueError(f"pack: {images.shape[0]} images but labels of shape {tuple(labels.shape)}")
    os.makedirs(folder, exist_ok=True)
    images.contiguous().numpy().tofile(os.path.join(folder, "images.u8"))
    labels.to(torch.int64).contiguous().numpy().tofile(os.path.join(folder, "labels.i64"))
    n, c, h, w = images.shape
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump({"n": n, "c": c, "h": h, "w": w}, f)


def augment(images, labels, idx, dy, dx, flip, mean, std, pad):
    """The batch of samples idx, randomly cropped at (dy, dx) of the image
    zero-padded by pad and flipped where flip, normalized; all tensors on one
    device. images (N, C, H, W) uint8; idx, dy, dx (B,) int64; flip (B,) bool;
    mean, std (C,) float32. Returns x (B, C, H, W) float32 and labels[idx]."""
    _, c, h, w = images.shape
    dev = images.device
    x = F.pad(images[idx], (pad, pad, pad, pad))                     # (B, C, H+2p, W+2p)
    ar_w = torch.arange(w, device=dev)
    rows = dy[:, None] + torch.arange(h, device=dev)                 # (B, H)
    cols = dx[:, None] + torch.where(flip[:, None], w - 1 - ar_w, ar_w)    # (B, W), reversed where flipped
    b = torch.arange(idx.shape[0], device=dev)[:, None, None, None]
    ch = torch.arange(c, device=dev)[None, :, None, None]
    x = x[b, ch, rows[:, None, :, None], cols[:, None, None, :]]     # (B, C, H, W)
    x = x.float().div_(255)
    return (x - mean[:, None, None]) / std[:, None, None], labels[idx]


class ServerImages:
    """The dataset pack() wrote into server folder path ("NAME/rel/folder"),
    read into server memory once (rgpu.from_file)."""

    def __init__(self, path, mean, std, pad=4):
        import rgpu
        meta = json.loads(rgpu.from_file(path + "/meta.json").cpu().numpy().tobytes())
        self.n, self.c, self.h, self.w = (meta[k] for k in ("n", "c", "h", "w"))
        self.images = rgpu.from_file(path + "/images.u8", torch.uint8, (self.n, self.c, self.h, self.w))
        self.labels = rgpu.from_file(path + "/labels.i64", torch.int64, (self.n,))
        self.mean_cpu = torch.tensor(mean, dtype=torch.float32)
        self.std_cpu = torch.tensor(std, dtype=torch.float32)
        if self.mean_cpu.shape != (self.c,) or self.std_cpu.shape != (self.c,):
            raise ValueError(f"ServerImages: mean and std need {self.c} values (one per channel)")
        self.mean, self.std = self.mean_cpu.to("rgpu"), self.std_cpu.to("rgpu")
        self.pad = pad

    def draw(self, batch, generator):
        """(idx, dy, dx, flip): the random numbers of one batch, on the CPU."""
        idx = torch.randint(self.n, (batch,), generator=generator)
        dy = torch.randint(2 * self.pad + 1, (batch,), generator=generator)
        dx = torch.randint(2 * self.pad + 1, (batch,), generator=generator)
        flip = torch.rand(batch, generator=generator) < 0.5
        return idx, dy, dx, flip

    def batch(self, draws):
        """(x, y) on rgpu for draws (from draw())."""
        idx, dy, dx, flip = (t.to("rgpu") for t in draws)
        return augment(self.images, self.labels, idx, dy, dx, flip, self.mean, self.std, self.pad)


def synthetic(n=1024, size=16, seed=0):
    """models.data.images scaled to uint8 (N, 3, size, size), and their labels."""
    from models.data import images
    x, y = images(n, size=size, seed=seed)
    lo, hi = x.min(), x.max()
    return ((x - lo) / (hi - lo) * 255).round().to(torch.uint8), y


def main():
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tools/: models.*
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true", help="pack a synthetic dataset and train the CNN on it")
    ap.add_argument("--pack", metavar="DIR", help="only pack the synthetic dataset into DIR")
    ap.add_argument("--path", help="train from this server folder (NAME/rel/folder) instead of packing one")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    if a.pack:
        pack(a.pack, *synthetic())
        return
    if not (a.demo or a.path):
        ap.error("give --demo, --path or --pack")
    if a.path is None:
        if os.environ.get("RGPU_SERVER"):
            ap.error("RGPU_SERVER is set: pack on the server's host (--pack DIR, DIR exposed with "
                     "rgpu-server --data) and pass --path NAME/...")
        with tempfile.TemporaryDirectory(prefix="rgpu-vision-") as folder:
            pack(folder, *synthetic())
            os.environ["RGPU_REMOTE_DATA"] = "ro:vision=" + folder      # the embedded server inherits it
            train("vision", a.steps, a.batch)
    else:
        train(a.path, a.steps, a.batch)


def train(path, steps, batch):
    """models.cnn's ResNetSmall trained on the dataset in server folder path."""
    import rgpu
    from models.cnn import ResNetSmall
    loader = ServerImages(path, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    torch.manual_seed(0)
    model = ResNetSmall(classes=10).to("rgpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    print(f"{loader.n} images {loader.c}x{loader.h}x{loader.w} on the server ({path})")
    for step in range(steps):
        b0 = rgpu.stats()["bytes_out"]
        x, y = loader.batch(loader.draw(batch, g))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step:3d}  loss {loss.item():.4f}  bytes sent {rgpu.stats()['bytes_out'] - b0}"
              f" (the batch's pixels: {batch * loader.c * loader.h * loader.w} bytes)", flush=True)


if __name__ == "__main__":
    main()
