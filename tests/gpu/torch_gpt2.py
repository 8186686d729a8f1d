#!/usr/bin/env python3
"""PyTorch baseline for deploy/gpu-check.sh: the GPT-2 124M shape (or any
--layers/--heads/--dim/--seq) trained with AdamW on random tokens, on one
GPU, printing tokens/s and MFU as llm.c counts FLOPs (6N + 6*L*C*T per
token; N the parameter count without the position embedding... as llm.c:
all parameters).

--precision bf16: torch.autocast(bfloat16), F.scaled_dot_product_attention
(flash), fused AdamW; --precision fp32: strict fp32 (TF32 off), the same
arithmetic the parallax fp32 CUDA path does. --compile adds torch.compile.
Output: one line "torch <precision> tokens/s X ms/step Y mfu Z% loss L".
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    a = ap.parse_args()
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    Vp = (a.vocab + 63) // 64 * 64
    dev = "cuda"
    model = GPT(a.layers, a.dim, a.heads, a.seq, Vp).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    fwd = torch.compile(model) if a.compile else model
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    times, loss = [], None
    for s in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = fwd(x, y, a.vocab)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    warm = times[min(5, len(times) - 1):]
    dt = sum(warm) / len(warm)
    tokens = a.batch * a.seq
    flops_per_token = 6 * nparams + 6 * a.layers * a.dim * a.seq
    mfu = flops_per_token * tokens / dt / (a.peak_tflops * 1e12)
    print(f"torch {a.precision}{' compile' if a.compile else ''} tokens/s {tokens / dt:.0f} "
          f"ms/step {1e3 * dt:.1f} mfu {100 * mfu:.1f}% loss {loss.item():.4f} "
          f"params {nparams}")


if __name__ == "__main__":
    main()
