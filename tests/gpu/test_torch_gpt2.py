#!/usr/bin/python3
"""test_torch_gpt2.py: the PyTorch baseline of the device check
(torch_gpt2.py) starts where parallax's model does.

On the CPU, a 2-layer model (dim 64, 4 heads, seq 32) at GPT-2's vocabulary
(50257, padded to 50304):
  * initialised as parallax's (init_like_parallax), the first loss is within
    0.15 of ln(50257) = 10.82; the residual projections have std
    0.02 / sqrt(2 L), the other weights 0.02, biases and padded wte rows 0;
  * left at PyTorch's default init it is above 15 (what made the device
    check print 62-90 at the 124M shape), so the first check can fail;
  * the script's own command line on the CPU prints its one line per batch
    with that first loss.
Skipped (77) where torch is missing.
usage: test_torch_gpt2.py TORCH_GPT2_PY"""
import math
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print('torch not importable: skipped')
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
import torch_gpt2  # noqa: E402

V, L, C, NH, T = 50257, 2, 64, 4, 32
Vp = (V + 63) // 64 * 64


def first_loss(init):
    torch.manual_seed(1)
    m = torch_gpt2.GPT(L, C, NH, T, Vp)
    if init:
        torch_gpt2.init_like_parallax(m, V)
    x = torch.randint(0, V, (4, T))
    y = torch.randint(0, V, (4, T))
    with torch.no_grad():
        return m(x, y, V).item(), m


def main():
    fails = 0
    ours, m = first_loss(True)
    ok = abs(ours - math.log(V)) < 0.15
    print('parallax init: first loss %.4f (ln V %.4f): %s' % (ours, math.log(V),
                                                              'ok' if ok else 'FAIL'))
    fails += not ok
    stds = {'proj': m.blocks[0].proj.weight.std().item(),
            'fc2': m.blocks[1].fc2.weight.std().item(),
            'qkv': m.blocks[0].qkv.weight.std().item(),
            'wte': m.wte.weight[:V].std().item()}
    want = {'proj': 0.02 / math.sqrt(2 * L), 'fc2': 0.02 / math.sqrt(2 * L), 'qkv': 0.02,
            'wte': 0.02}
    for k in stds:
        ok = abs(stds[k] - want[k]) < 0.05 * want[k]
        print('%s std %.5f (want %.5f): %s' % (k, stds[k], want[k], 'ok' if ok else 'FAIL'))
        fails += not ok
    zeros = (m.wte.weight[V:].abs().max().item() == 0 and m.blocks[0].qkv.bias.abs().max().item() == 0)
    print('padded wte rows and biases zero: %s' % ('ok' if zeros else 'FAIL'))
    fails += not zeros
    default, _ = first_loss(False)
    ok = default > 15
    print("PyTorch's default init: first loss %.2f (> 15): %s" % (default, 'ok' if ok else 'FAIL'))
    fails += not ok
    out = subprocess.run([sys.executable, sys.argv[1], '--device', 'cpu', '--precision', 'fp32',
                          '--layers', str(L), '--dim', str(C), '--heads', str(NH), '--seq', str(T),
                          '--batch', '2,3', '--steps', '2', '--warmup', '1'],
                         capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('torch fp32 eager batch')]
    ok = out.returncode == 0 and len(lines) == 2
    if ok:
        f = lines[0].split()
        ok = abs(float(f[f.index('loss0') + 1]) - math.log(V)) < 0.15 and \
            float(f[f.index('tokens/s') + 1]) > 0
    print('script on the CPU: %s\n%s' % ('ok' if ok else 'FAIL', out.stdout + out.stderr[-2000:]))
    fails += not ok
    print('test_torch_gpt2: %s' % ('PASS' if not fails else '%d FAILED' % fails))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
