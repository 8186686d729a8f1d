#!/usr/bin/env python3
"""bench_tp.py: tensor parallelism's memory and step time (benchmark, not a
test; issue 9).

Model: 4 layers, 8 heads, dim 256, seq 128, global batch 8 (vocab 256),
fp32, through the standalone bootstrap on this machine's cores.
  1. Memory: every rank's measured peak (memacct, --metrics-out) of
     parameters and of activations for tp = 1, 2, 4 (one rank, two, four),
     with and without sequence parallelism, next to `pctl plan`'s
     prediction, and their ratio.
  2. Time: tp=1 with dp=2 against tp=2 on two ranks (and tp=2 with sequence
     parallelism), STEPS steps (default 8); over steps 3.. the median step
     time, the share of it the rank was blocked in tensor-parallel
     collectives (tp_comm_s), and the share of the tensor-parallel
     communication hidden behind compute by the backward overlap
     (tp_hidden_s / (tp_comm_s + tp_hidden_s), tp.h), averaged over ranks.

usage: bench_tp.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR [STEPS]"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'engine'))
from zero_util import license_tokens, run_world  # noqa: E402

DIMS = ['--layers', '4', '--heads', '8', '--dim', '256', '--seq', '128']
BATCH = ['--batch', '8']


def plan(pctl, par):
    return json.loads(subprocess.run([pctl, 'plan'] + DIMS + BATCH + par +
                                     ['--zero', '0', '--precision', 'fp32', '--json'],
                                     check=True, capture_output=True, text=True).stdout)


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:5]
    steps = int(sys.argv[5]) if len(sys.argv) == 6 else 8
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    base = DIMS + BATCH + ['--data', data]
    print('model: 4 layers, 8 heads, dim 256, seq 128, global batch 8, vocab 256, fp32')
    print()
    print('memory per rank (rank 0; every rank checked equal), measured peak vs pctl plan')
    print('%-8s %5s %12s %12s %7s %12s %12s %7s' % (
        'layout', 'ranks', 'params B', 'plan', 'ratio', 'activ. B', 'plan', 'ratio'))
    for tp in (1, 2, 4):
        for sp in ((False, True) if tp > 1 else (False,)):
            par = (['--tp', str(tp)] if tp > 1 else []) + (['--sequence-parallel'] if sp else [])
            name = 'tp%d%s' % (tp, 'sp' if sp else '')
            p = plan(pctl, par)
            runs = run_world(rank_bin, base + par + ['--steps', '2'], work, 'mem_' + name, tp)
            if runs is None:
                print('%-8s failed' % name)
                continue
            mems = [rr[-1]['memory'] for rr in runs]
            pp, pa = [m['params']['peak'] for m in mems], [m['activations']['peak'] for m in mems]
            want_p, want_a = p['stages'][0]['params_bytes'], p['activations_bytes']
            same = len(set(pp)) == 1 and len(set(pa)) == 1
            print('%-8s %5d %12d %12d %7.4f %12d %12d %7.4f%s' % (
                name, tp, pp[0], want_p, pp[0] / want_p, pa[0], want_a, pa[0] / want_a,
                '' if same else '  (ranks differ: %s %s)' % (pp, pa)))
    print()
    print('step time on two ranks, %d steps, median of steps 3..%d' % (steps, steps))
    print('%-12s %10s %10s %14s %14s %10s' % ('layout', 'step ms', 'tok/s', 'tp blocked %',
                                               'tp hidden ms', 'hidden %'))
    for name, par in (('dp2 (tp1)', ['--dp', '2']), ('tp2', ['--tp', '2']),
                      ('tp2 + SP', ['--tp', '2', '--sequence-parallel'])):
        runs = run_world(rank_bin, base + par + ['--steps', str(steps)], work,
                         'time_' + name.split()[0], 2, deadline_s=600)
        if runs is None:
            print('%-12s failed' % name)
            continue
        step_ms, blocked, hidden, hid_share = [], [], [], []
        for rr in runs:
            for a, b in zip(rr[1:], rr[2:]):  # deltas from step 3 on
                dc = b['tp_comm_s'] - a['tp_comm_s']
                dh = b['tp_hidden_s'] - a['tp_hidden_s']
                step_ms.append(1e3 * b['step_s'])
                blocked.append(dc / b['step_s'])
                hidden.append(1e3 * dh)
                hid_share.append(dh / (dc + dh) if dc + dh > 0 else 0.0)
        med = statistics.median(step_ms)
        print('%-12s %10.1f %10.0f %13.1f%% %14.2f %9.1f%%' % (
            name, med, 8 * 128 / (med / 1e3), 100 * statistics.mean(blocked),
            statistics.mean(hidden), 100 * statistics.mean(hid_share)))
    print('(tp blocked %: share of the step a rank could not compute because of tensor-'
          'parallel collectives; hidden %: share of their communication time in flight '
          'behind the weight-gradient GEMMs, an upper bound by one poke interval)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
