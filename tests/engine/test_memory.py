#!/usr/bin/env python3
"""test_memory.py: measured memory per rank against `pctl plan` (integration).

An 8-layer GPT of 4.9M parameters (dim 224, 4 heads, seq 32, vocab 256) on
dp=4 for 2 steps under ZeRO 0, 1, 2 and 3. Each rank reports (memacct) the
peak bytes of parameters + gradients + optimizer state held at one time;
checks, for every stage and rank:
  * within 5% of `pctl plan --layers 8 --dim 224 --heads 4 --seq 32 --dp 4
    --zero Z --precision fp32 --json` ("at once"; they are computed by the same
    code, so in practice equal), and each category's peak equals the plan's;
  * stage 3 <= 0.35 x stage 0.
Prints the table (bytes) for the issue's note.

usage: test_memory.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, run_world  # noqa: E402

DIMS = ['--layers', '8', '--heads', '4', '--dim', '224', '--seq', '32']
DP = 4


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = 0
    peaks = {}
    print('%-5s %14s %14s %8s   %s' % ('zero', 'measured B', 'plan B', 'ratio',
                                        'params/grads/optimizer peak (plan)'))
    for zero in range(4):
        plan = json.loads(subprocess.run(
            [pctl, 'plan'] + DIMS + ['--dp', str(DP), '--zero', str(zero), '--precision',
                                     'fp32', '--json'],
            check=True, capture_output=True, text=True).stdout)['stages'][0]
        runs = run_world(rank_bin, DIMS + ['--batch', '8', '--steps', '2', '--data', data,
                                           '--zero', str(zero)], work, 'mem_z%d' % zero, DP)
        if runs is None:
            print('FAIL zero %d: a rank failed' % zero)
            failures += 1
            continue
        for r, rr in enumerate(runs):
            mem = rr[-1]['memory']
            got = mem['state_peak']
            want = plan['state_peak_bytes']
            cats = [(mem[c]['peak'], plan[k]) for c, k in (
                ('params', 'params_bytes'), ('grads', 'grads_bytes'),
                ('optimizer', 'optimizer_bytes'))]
            ok = abs(got - want) <= 0.05 * want and all(
                abs(a - b) <= 0.05 * b for a, b in cats)
            if r == 0 or not ok:
                print('%-5d %14d %14d %8.4f   %s %s' % (
                    zero, got, want, got / want,
                    ' / '.join('%d (%d)' % (a, b) for a, b in cats), 'ok' if ok else
                    'FAIL rank %d' % r))
            failures += not ok
            peaks.setdefault(zero, got)
    if 0 in peaks and 3 in peaks:
        ratio = peaks[3] / peaks[0]
        print('stage 3 / stage 0 = %.4f (limit 0.35) %s' % (ratio, 'ok' if ratio <= 0.35
                                                              else 'FAIL'))
        failures += ratio > 0.35
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
