#!/usr/bin/python3
"""torch_gpt_bench.py: the PyTorch peer of parallax-rank's single-rank
training throughput (bench_tokens.sh runs it beside the engine). Trains
torch_gpt_model.GPT with AdamW on CPU, --threads torch threads, on one
fixed random batch of (B, T) tokens: 3 warm-up steps, then --steps timed
steps (wall clock). Prints one line:

  torch VERSION params=N B=.. T=.. L=.. C=.. threads=..: X ms/step, Y tokens/s, Z GFLOP/s (6N rule)

Needs PyTorch: Debian's python3-torch, hence /usr/bin/python3 (a pyenv or
venv python3 first on PATH usually has no torch). Same flags as
parallax-rank's model flags:

  tests/bench/torch_gpt_bench.py --layers 4 --heads 4 --dim 128 --seq 128 --batch 8 --steps 20
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch_gpt_model import add_model_args, build  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_model_args(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model, opt = build(a)
    n = sum(t.numel() for t in model.parameters())
    x = torch.randint(0, a.vocab, (a.batch, a.seq))
    y = torch.randint(0, a.vocab, (a.batch, a.seq))

    def step():
        opt.zero_grad()
        model(x, y).backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.time()
    for _ in range(a.steps):
        step()
    dt = time.time() - t0
    tokens = a.batch * a.seq * a.steps
    print('torch %s params=%d B=%d T=%d L=%d C=%d threads=%d: %.1f ms/step, %.0f tokens/s, '
          '%.1f GFLOP/s (6N rule)' % (torch.__version__, n, a.batch, a.seq, a.layers, a.dim,
                                      a.threads, dt / a.steps * 1e3, tokens / dt,
                                      6 * n * tokens / dt / 1e9))
    return 0


if __name__ == '__main__':
    sys.exit(main())
