#!/usr/bin/python3
"""PyTorch baseline for deploy/gpu-check.sh's speed section: the GPT-2 124M
shape (or any --layers/--heads/--dim/--seq) trained with AdamW on random
tokens, printing tokens/s and MFU as llm.c counts FLOPs (6N + 6*L*C*T per
token, N every parameter).

The model is initialised as parallax's engine does (engine/gpt.c,
planner/model.c): every weight matrix and both embeddings N(0, 0.02), the
two projections into the residual stream (attention proj, MLP fc2)
N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorms 1 and 0, the padded vocabulary
rows of wte 0. So its first loss is near ln(vocab) (10.8 at 50257), as
ours is; PyTorch's default init (Embedding N(0, 1), tied to the head) starts
at 60-90.

--precision bf16: torch.autocast(bfloat16), F.scaled_dot_product_attention,
fused AdamW; --precision fp32: strict fp32 (TF32 off), the arithmetic of the
parallax fp32 CUDA path. --compile: torch.compile. --batch takes a list
(8,32,64): one model and optimizer, each batch measured in turn.
Output: one line per batch,
  "torch <precision> <eager|compile> batch B tokens/s X ms/step Y mfu Z%
   loss0 L0 loss L params N"
(loss0: the first step's loss at that batch; the model trains on from one
batch to the next, so only the first batch's loss0 is the initial loss).
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v):
    """Causal attention of (B, NH, T, hs) tensors: SDPA where this PyTorch
    has it (2.0 on), else the plain softmax form."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, Vp):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets, V):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied head
        logits = logits[..., :V]  # the padded rows never score
        return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))


@torch.no_grad()
def init_like_parallax(model, vocab):
    """parallax's initialisation (engine/gpt.c px_gpt_init_unit_range, the
    init kinds of planner/model.c): N(0, 0.02) weights and embeddings,
    N(0, 0.02 / sqrt(2 L)) for the residual projections, zero biases and
    padded wte rows; LayerNorms keep PyTorch's ones and zeros."""
    L = len(model.blocks)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
    for b in model.blocks:
        for lin in (b.proj, b.fc2):
            nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2 * L))
    model.wte.weight[vocab:].zero_()


def measure(model, fwd, opt, a, batch, dev):
    """Trains a.steps steps at batch; returns (tokens/s over the steps after
    the warm-up ones, the first loss, the last loss)."""
    x = torch.randint(0, a.vocab, (batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (batch, a.seq), device=dev)
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    times, losses = [], []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16,
                            enabled=a.precision == "bf16"):
            loss = fwd(x, y, a.vocab)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    warm = times[min(a.warmup, len(times) - 1):]
    dt = sum(warm) / len(warm)
    return batch * a.seq / dt, dt, losses[0], losses[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", default="8", help="one batch or a list: 8,32,64")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4, help="steps not timed (compiles, plans)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    a = ap.parse_args()
    batches = [int(b) for b in a.batch.split(",") if b]
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    Vp = (a.vocab + 63) // 64 * 64
    model = GPT(a.layers, a.dim, a.heads, a.seq, Vp)
    init_like_parallax(model, a.vocab)
    model = model.to(a.device)
    nparams = sum(p.numel() for p in model.parameters())
    extra = {"fused": True} if a.device.startswith("cuda") else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **extra)
    fwd = torch.compile(model) if a.compile else model
    flops_per_token = 6 * nparams + 6 * a.layers * a.dim * a.seq
    for batch in batches:
        tps, dt, loss0, loss = measure(model, fwd, opt, a, batch, a.device)
        mfu = flops_per_token * tps / (a.peak_tflops * 1e12)
        print(f"torch {a.precision} {'compile' if a.compile else 'eager'} batch {batch} "
              f"tokens/s {tps:.0f} ms/step {1e3 * dt:.1f} mfu {100 * mfu:.1f}% "
              f"loss0 {loss0:.4f} loss {loss:.4f} params {nparams}", flush=True)


if __name__ == "__main__":
    main()
