"""A character-level GPT (decoder-only transformer), written for rgpu's tests,
demo and benchmark.

GPTConfig() is the shape of nanoGPT's "shakespeare-char" run: 6 layers, 6
heads, 384 wide, 256 characters of context, a 65-character vocabulary, biases
on, the token embedding tied to the output head: 10.77 M parameters counting
the position embedding (nanoGPT prints 10.65 M for its bias=False default,
which it counts without the position embedding).
GPTConfig.tiny() is a reduced shape for tests.

Attention is F.scaled_dot_product_attention(is_causal=True) (attn="sdpa"; off
CUDA it takes PyTorch's math path, which is plain ATen ops) or an explicit
masked softmax (attn="mask"); both compute the same function.

Shapes: B batch, T time (<= block_size), C n_embd, H heads, D = C / H.
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = True
    attn: str = "sdpa"              # "sdpa" or "mask"

    @classmethod
    def tiny(cls, **kw):
        """2 layers, 2 heads, 64 wide, 32 characters of context."""
        return replace(cls(n_layer=2, n_head=2, n_embd=64, block_size=32), **kw)

    @classmethod
    def small(cls, **kw):
        """4 layers, 4 heads, 128 wide, 64 characters of context (the demo)."""
        return replace(cls(n_layer=4, n_head=4, n_embd=128, block_size=64), **kw)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_drop = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.attn = cfg.attn
        if cfg.attn == "mask":
            causal = torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool).tril()
            self.register_buffer("causal", causal.view(1, 1, cfg.block_size, cfg.block_size),
                                 persistent=False)

    def forward(self, x):                                   # x is (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, H, T, D)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        p = self.attn_drop if self.training else 0.0
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))   # (B, H, T, T)
            att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), p, self.training)
            y = att @ v                                                     # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x))"""

    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg = cfg or GPTConfig()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight                  # weight tying
        self.apply(self._init)
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
        self.register_buffer("positions", torch.arange(cfg.block_size), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        # Module.to() may give each module its own new Parameter when the tensor type
        # changes (it does for rgpu's wrapper subclass): keep the head tied.
        super()._apply(fn, *args, **kwargs)
        if self.head.weight is not self.tok.weight:
            self.head.weight = self.tok.weight
        return self

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def num_params(self, embeddings=True):
        """parameter count (tied weights once); without the position embedding if not embeddings"""
        n = sum(p.numel() for p in self.parameters())
        return n if embeddings else n - self.pos.weight.numel()

    def forward(self, idx, targets=None):                  # idx is (B, T) int64
        B, T = idx.shape
        assert T <= self.cfg.block_size, f"sequence of {T} > block_size {self.cfg.block_size}"
        x = self.drop(self.tok(idx) + self.pos(self.positions[:T]))        # (B, T, C)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))                                    # (B, T, vocab)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss

    def configure_optimizer(self, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.99), **kw):
        """AdamW with decay on matrices only (weights of Linear and Embedding), like nanoGPT."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        rest = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, **kw)

    @torch.no_grad()
    def generate(self, idx, n, temperature=1.0, generator=None):
        """append n sampled characters to idx (B, T); sampling happens on the CPU"""
        for _ in range(n):
            logits, _ = self(idx[:, -self.cfg.block_size:])
            probs = F.softmax(logits[:, -1, :].float().cpu() / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).to(idx.device)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


if __name__ == "__main__":
    m = GPT()
    print(f"GPT {m.cfg}: {m.num_params() / 1e6:.2f} M parameters "
          f"({m.num_params(embeddings=False) / 1e6:.2f} M without the position embedding)")
    t = GPT(GPTConfig.tiny())
    print(f"tiny: {t.num_params()} parameters")
