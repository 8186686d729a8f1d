#!/usr/bin/python3
"""sdpa_bench.py: PyTorch's scaled_dot_product_attention at the GPT-2 124M
shape (B 8, T 1024, 12 heads of 64, causal, bf16), forward + backward, with
each backend alone: flash, cuDNN, memory-efficient (and math, for
reference): the figures the attn section of deploy/gpu-check.sh puts beside
parallax's attention kernels (px-opcheck --attn-rate).

Timing: CUDA events around 20 repetitions after 5 warm-ups, forward and
backward apart. A backend this PyTorch or GPU lacks prints "not run" and
why. Output lines:
  "sdpa <backend> B 8 T 1024 NH 12 hs 64: X ms fwd+bwd (fwd F, bwd B)"
usage: sdpa_bench.py [--batch 8] [--seq 1024] [--heads 12] [--hs 64] [--reps 20]"""
import argparse
import sys

import torch
import torch.nn.functional as F


def backends():
    """[(name, context manager factory)] for the backends this PyTorch names."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return []
    out = []
    for name, attr in (('flash', 'FLASH_ATTENTION'), ('cudnn', 'CUDNN_ATTENTION'),
                       ('mem-efficient', 'EFFICIENT_ATTENTION'), ('math', 'MATH')):
        if hasattr(SDPBackend, attr):
            out.append((name, lambda b=getattr(SDPBackend, attr): sdpa_kernel(b)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--seq', type=int, default=1024)
    ap.add_argument('--heads', type=int, default=12)
    ap.add_argument('--hs', type=int, default=64)
    ap.add_argument('--reps', type=int, default=20)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print('sdpa: not run: no CUDA device')
        return 0
    bks = backends()
    if not bks:
        print('sdpa: not run: this PyTorch (%s) has no torch.nn.attention.sdpa_kernel' %
              torch.__version__)
        return 0
    shape = (a.batch, a.heads, a.seq, a.hs)
    q, k, v = (torch.randn(shape, device='cuda', dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, device='cuda', dtype=torch.bfloat16)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    for name, ctx in bks:
        try:
            with ctx():
                for _ in range(5):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out.backward(dout)
                torch.cuda.synchronize()
                f = b = 0.0
                for _ in range(a.reps):
                    q.grad = k.grad = v.grad = None
                    ev[0].record()
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    ev[1].record()
                    out.backward(dout)
                    ev[2].record()
                    ev[2].synchronize()
                    f += ev[0].elapsed_time(ev[1])
                    b += ev[1].elapsed_time(ev[2])
            f, b = f / a.reps, b / a.reps
            print('sdpa %s B %d T %d NH %d hs %d: %.3f ms fwd+bwd (fwd %.3f, bwd %.3f)' %
                  (name, a.batch, a.seq, a.heads, a.hs, f + b, f, b), flush=True)
        except Exception as e:  # a backend that does not take this shape or GPU
            print('sdpa %s: not run: %s: %s' % (name, type(e).__name__,
                                                str(e).splitlines()[0][:160] if str(e) else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
