#!/usr/bin/env python3
"""test_tp_memory.py: measured memory per rank of tensor-parallel jobs against
`pctl plan` (integration; issue 9).

A 2-layer GPT (dim 64, 4 heads, seq 32, vocab 256, global batch 8) for 2
steps on tp=2 (ZeRO 0), tp=2 with sequence parallelism (ZeRO 0), and dp=2 x
tp=2 with sequence parallelism under ZeRO-3. Every rank reports (memacct,
--metrics-out) its peak bytes per category; checks, for every rank:
  * params, grads, optimizer and activations peaks within 5% of `pctl plan
    --tp T [--sequence-parallel] --dp D --batch 8 --zero Z --precision fp32
    --json` (the same code lays the buffers out, so in practice equal);
  * activations with sequence parallelism below those without.

usage: test_tp_memory.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, run_world  # noqa: E402

DIMS = ['--layers', '2', '--heads', '4', '--dim', '64', '--seq', '32']
CASES = [  # name, world, dp, tp, zero, sequence parallel
    ('tp2', 2, 1, 2, 0, False),
    ('tp2sp', 2, 1, 2, 0, True),
    ('dp2tp2spz3', 4, 2, 2, 3, True),
]
CATS = (('params', 'params_bytes'), ('grads', 'grads_bytes'),
        ('optimizer', 'optimizer_bytes'), ('activations', None))


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = 0
    acts = {}
    print('%-11s %-12s %12s %12s %8s' % ('layout', 'category', 'measured B', 'plan B', 'ratio'))
    for name, world, dp, tp, zero, sp in CASES:
        par = ['--dp', str(dp), '--tp', str(tp), '--zero', str(zero)] + \
            (['--sequence-parallel'] if sp else [])
        plan = json.loads(subprocess.run(
            [pctl, 'plan'] + DIMS + par + ['--batch', '8', '--precision', 'fp32', '--json'],
            check=True, capture_output=True, text=True).stdout)
        stage = plan['stages'][0]
        runs = run_world(rank_bin, DIMS + par + ['--batch', '8', '--steps', '2', '--data', data],
                         work, name, world)
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        for r, rr in enumerate(runs):
            mem = rr[-1]['memory']
            for cat, key in CATS:
                got = mem[cat]['peak']
                want = stage[key] if key else plan['activations_bytes']
                ok = want > 0 and abs(got - want) <= 0.05 * want
                if r == 0 or not ok:
                    print('%-11s %-12s %12d %12d %8.4f %s' % (
                        name, cat, got, want, got / want if want else 0,
                        'ok' if ok else 'FAIL rank %d' % r))
                failures += not ok
        acts[name] = runs[0][-1]['memory']['activations']['peak']
    if 'tp2' in acts and 'tp2sp' in acts:
        ok = acts['tp2sp'] < acts['tp2']
        print('activations with SP %d < without %d: %s' % (acts['tp2sp'], acts['tp2'],
                                                           'ok' if ok else 'FAIL'))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
