#!/usr/bin/env python3
"""test_cp_memory.py: measured memory per rank of context-parallel jobs against
`pctl plan` (integration; issue 11).

A 2-layer GPT (dim 64, 4 heads, seq 128, vocab 256, global batch 4) for 2
steps on cp=1, cp=2, cp=4 and dp=2 x cp=2 under ZeRO-1. Every rank reports
(memacct, --metrics-out) its peak bytes per category; checks, for every rank:
  * params, grads, optimizer and activations peaks within 5% of `pctl plan
    --cp C --dp D --batch 4 --zero Z --precision fp32 --json` (the same code
    lays the buffers out; the plan counts the ring attention's buffers and
    ZeRO's shards over dp x cp);
  * the plan's per-rank sequence is seq / cp;
  * the activation peak falls with cp: cp=4 < cp=2 < cp=1.

usage: test_cp_memory.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, run_world  # noqa: E402

DIMS = ['--layers', '2', '--heads', '4', '--dim', '64', '--seq', '128']
CASES = [  # name, world, dp, cp, zero
    ('cp1', 1, 1, 1, 0),
    ('cp2', 2, 1, 2, 0),
    ('cp4', 4, 1, 4, 0),
    ('dp2cp2z1', 4, 2, 2, 1),
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
    print('%-9s %-12s %12s %12s %8s' % ('layout', 'category', 'measured B', 'plan B', 'ratio'))
    for name, world, dp, cp, zero in CASES:
        par = ['--dp', str(dp), '--cp', str(cp), '--zero', str(zero)]
        plan = json.loads(subprocess.run(
            [pctl, 'plan'] + DIMS + par + ['--batch', '4', '--precision', 'fp32', '--json'],
            check=True, capture_output=True, text=True).stdout)
        if plan.get('seq_per_rank') != 128 // cp:
            print('FAIL %s: plan seq_per_rank %s, want %d' % (name, plan.get('seq_per_rank'),
                                                             128 // cp))
            failures += 1
        stage = plan['stages'][0]
        runs = run_world(rank_bin, DIMS + par + ['--batch', '4', '--steps', '2', '--data', data],
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
                    print('%-9s %-12s %12d %12d %8.4f %s' % (
                        name, cat, got, want, got / want if want else 0,
                        'ok' if ok else 'FAIL rank %d' % r))
                failures += not ok
        acts[name] = runs[0][-1]['memory']['activations']['peak']
    if all(k in acts for k in ('cp1', 'cp2', 'cp4')):
        ok = acts['cp4'] < acts['cp2'] < acts['cp1']
        print('activations cp4 %d < cp2 %d < cp1 %d: %s' % (acts['cp4'], acts['cp2'],
                                                            acts['cp1'], 'ok' if ok else 'FAIL'))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
