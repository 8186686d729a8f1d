#!/usr/bin/python3
"""bench_cp.py: context parallelism (ring attention) at sequence 1024
(benchmark, not a test; issue 11).

Model: 2 layers, 4 heads, dim 64, seq 1024, global batch 2 (vocab 256),
fp32, through the standalone bootstrap on this machine's cores, for cp = 1,
2, 4 (one, two, four ranks). Per layout, over steps 2.. (default 6 steps):
  * tokens/s (the median step's global tokens / step time);
  * the fraction of ring communication hidden behind compute: of the time
    each step's k|v and dk|dv transfers were in flight, the share the rank
    was not blocked waiting for them (ring_attn.h; the rank log's
    `cp N: ... % of ring communication hidden` line, whole run, rank 0);
  * the activation peak per rank (memacct, --metrics-out) next to
    `pctl plan --cp N`'s prediction.
On a machine with fewer cores than ranks the ranks share cores, so tokens/s
shows the cost of the ring on oversubscribed CPUs, not a speed-up.

usage: bench_cp.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR [STEPS]"""
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'engine'))
from zero_util import license_tokens, log_text, run_world  # noqa: E402

DIMS = ['--layers', '2', '--heads', '4', '--dim', '64', '--seq', '1024']
BATCH = ['--batch', '2']


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:5]
    steps = int(sys.argv[5]) if len(sys.argv) == 6 else 6
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('model: 2 layers, 4 heads, dim 64, seq 1024, global batch 2, vocab 256, fp32, '
          '%d steps, %d cores' % (steps, os.cpu_count()))
    print('%-4s %6s %10s %10s %14s %14s %7s' % ('cp', 'ranks', 'tokens/s', 'ring hid',
                                                'act peak B', 'plan B', 'ratio'))
    for cp in (1, 2, 4):
        par = ['--cp', str(cp)] if cp > 1 else []
        plan = json.loads(subprocess.run(
            [pctl, 'plan'] + DIMS + BATCH + par + ['--zero', '0', '--precision', 'fp32',
                                                   '--json'],
            check=True, capture_output=True, text=True).stdout)
        tag = 'cp%d' % cp
        runs = run_world(rank_bin, DIMS + BATCH + par + ['--steps', str(steps), '--data', data,
                                                         '--lr', '1e-3'],
                         work, tag, cp, deadline_s=900)
        if runs is None:
            print('%-4d a rank failed' % cp)
            continue
        tps = statistics.median(m['tokens_per_second'] for m in runs[0][1:])
        hidden = '-'
        if cp > 1:
            m = re.search(r'(\d+)% of ring communication hidden', log_text(work, tag, 0))
            hidden = m.group(1) + '%' if m else '?'
        peak = max(rr[-1]['memory']['activations']['peak'] for rr in runs)
        want = plan['activations_bytes']
        print('%-4d %6d %10.0f %10s %14d %14d %7.4f' % (cp, cp, tps, hidden, peak, want,
                                                        peak / want))
    return 0


if __name__ == '__main__':
    sys.exit(main())
