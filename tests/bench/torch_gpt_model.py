"""torch_gpt_model.py: the GPT that the PyTorch peer benchmarks train
(torch_gpt_bench.py on one process, torch_ddp_bench.py under DDP), built as
parallax's engine builds it so that both sides do the same arithmetic per
token: pre-LayerNorm blocks, causal self-attention over NH heads written
out as the CPU engine computes it (scores, mask, softmax, weighted sum; no
fused kernel), a tanh-GELU MLP of width 4C, learned positions, a final
LayerNorm and an LM head tied to the token embedding (GPT-2's layout, as in
llm.c). Shapes: tokens (B, T) -> loss (scalar), activations (B, T, C).

Not a reference for the loss (tests/reference/ holds that): the benchmarks
time it on random tokens."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """One transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        # (B, T, C) -> (B, NH, T, hs)
        q, k, v = [t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)                  # (B, NH, T, T)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float('-inf')).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate='tanh'))


class GPT(nn.Module):
    """vocab V, context T (seq), L layers of NH heads at width C (dim)."""

    def __init__(self, vocab, seq, layers, heads, dim):
        super().__init__()
        if dim % heads:
            raise ValueError('dim %d is not divisible by heads %d' % (dim, heads))
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.lnf = nn.LayerNorm(dim)

    def forward(self, idx, targets):
        """idx, targets (B, T) int64 -> mean cross-entropy over B x T tokens"""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T                          # (B, T, V)
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


def add_model_args(p, batch_help='batch in sequences'):
    """The model and run flags both benchmarks share, named as parallax-rank's."""
    p.add_argument('--vocab', type=int, default=256)
    p.add_argument('--seq', type=int, default=128)
    p.add_argument('--layers', type=int, default=4)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--dim', type=int, default=128)
    p.add_argument('--batch', type=int, default=8, help=batch_help)
    p.add_argument('--steps', type=int, default=20, help='timed steps, after 3 warm-up steps')
    p.add_argument('--threads', type=int, default=1, help='torch threads per process')
    p.add_argument('--lr', type=float, default=1e-3, help='AdamW learning rate')


def build(a):
    """The model and its AdamW optimizer, seeded (seed 0) for repeatable timing."""
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.dim)
    return model, torch.optim.AdamW(model.parameters(), lr=a.lr)
