#!/usr/bin/python3
"""bench_moe.py: the mixture of experts' throughput over expert parallelism
(benchmark, not a test; issue 11).

Model: 4 layers (2 MoE: --moe-every 2), 4 heads, dim 128, seq 64, vocab
256, 8 experts top-2, capacity factor 1.25, global batch 16, lr 3e-4 after 4 warm-up steps, fp32, on 4
ranks through the standalone bootstrap (dp 4 with ep 1, 2, 4: the same
world, the same batch per rank). For each ep, over steps 3..STEPS (default
10): the median step time and the tokens/s it gives, the share of the step
the ranks spent in the MoE dispatch / combine all-to-alls (moe_alltoall_s /
step_s, averaged over ranks), the expert parameters one rank holds (pctl
plan) and its measured parameter bytes, and the choices dropped.

usage: bench_moe.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR [STEPS]"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'engine'))
from zero_util import license_tokens, run_world  # noqa: E402

DIMS = ['--layers', '4', '--heads', '4', '--dim', '128', '--seq', '64']
MOE = ['--experts', '8', '--top-k', '2', '--moe-every', '2', '--capacity-factor', '1.25']
TRAIN = ['--lr', '3e-4', '--warmup', '4']
BATCH, WORLD = 16, 4


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:5]
    steps = int(sys.argv[5]) if len(sys.argv) == 6 else 10
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('model: 4 layers (2 MoE), 4 heads, dim 128, seq 64, 8 experts top-2, capacity 1.25, '
          'global batch %d, fp32; world %d (dp %d)' % (BATCH, WORLD, WORLD))
    print('%-5s %10s %10s %12s %14s %14s %10s' % ('ep', 'step ms', 'tokens/s', 'all-to-all',
                                                   'expert params', 'params B/rank',
                                                   'dropped'))
    for ep in (1, 2, 4):
        par = ['--dp', str(WORLD), '--ep', str(ep)]
        plan = json.loads(subprocess.run([pctl, 'plan'] + DIMS + MOE + par +
                                         ['--batch', str(BATCH), '--zero', '0', '--precision',
                                          'fp32', '--json'], check=True, capture_output=True,
                                         text=True).stdout)
        runs = run_world(rank_bin, DIMS + MOE + TRAIN + par + ['--batch', str(BATCH), '--steps',
                                                       str(steps), '--data', data],
                         work, 'ep%d' % ep, WORLD, deadline_s=600)
        if runs is None:
            print('%-5d failed' % ep)
            continue
        step = statistics.median(m['step_s'] for m in runs[0][2:])
        share = statistics.mean(m['moe_alltoall_s'] / m['step_s'] for r in runs for m in r[2:])
        dropped = sum(sum(m['moe_dropped']) for r in runs[::ep] for m in r)
        print('%-5d %10.1f %10.0f %11.1f%% %14d %14d %10d' % (
            ep, 1e3 * step, BATCH * 64 / step, 100 * share, plan['moe']['rank_params'],
            runs[0][-1]['memory']['params']['peak'], dropped))
    return 0


if __name__ == '__main__':
    sys.exit(main())
