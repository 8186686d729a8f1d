#!/usr/bin/env python3
"""test_zero3_overlap.py: ZeRO-3's backward schedule (zero.c rs_allowed,
deferred_gather; integration, issue 13).

1. dp=2 ZeRO-3, 3 layers, 3 steps: each layer's backward from layer L-1 down
   to layer 1 runs the reduce-scatter of the unit above under its first
   kernels, then starts the next layer's gather from the progress hook:
   every rank logs exactly (L - 1) x steps such gathers ("started under
   compute after a reduce-scatter"), and the losses equal those of the
   same run without prefetch (which waits for each collective at once)
   within 1e-5 relative. The state peak equals the plan's.
   The per-wait log (PX_ZERO_WAIT_LOG=1) shows the rest of the schedule:
   no reduce-scatter is waited for when a gradient buffer is taken but
   layer 1's, when layer 0 takes its own (layer 0 prefetches nothing, and
   keeping layer 1's gradients through it would exceed the plan's gradient
   peak); layer 0's and the embedding's are waited at the micro-batch's
   end; and the last layer stays gathered from
   its forward to its backward: 2L + 1 gathers a step (embedding, L
   layers, head; L - 1 layers again in backward), none of it in backward;
   the embedding's and layer 0's gathers of every step after the first are
   started by the update before it (2 (steps - 1) of them).
2. The fault case of test_bucket_fault.py at ZeRO-3: dp=4, rank 2
   SIGKILLed after step 3 while gathers and reduce-scatters are in flight
   (some completed inside the progress hook, whose error is kept and
   returned by the next hook): every survivor exits non-zero within the
   deadline, naming rank 2.

usage: test_zero3_overlap.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_bucket_fault import one  # noqa: E402
from zero_util import license_tokens, log_text, rel, run_world  # noqa: E402

LAYERS, STEPS = 3, 3
ARGS = ['--layers', str(LAYERS), '--heads', '4', '--dim', '64', '--seq', '64', '--batch', '16',
        '--steps', str(STEPS), '--zero', '3']


def schedule(rank_bin, data, work):
    bad = []
    os.environ['PX_ZERO_WAIT_LOG'] = '1'
    runs = run_world(rank_bin, ARGS + ['--data', data], work, 'z3', 2)
    del os.environ['PX_ZERO_WAIT_LOG']
    ref = run_world(rank_bin, ARGS + ['--data', data, '--no-prefetch'], work, 'z3np', 2)
    if runs is None or ref is None:
        return ['a rank failed']
    for r in range(2):
        text = log_text(work, 'z3', r)
        m = re.search(r'\((\d+) gathers, (\d+) started under compute after a reduce-scatter\)',
                      text)
        want = (LAYERS - 1) * STEPS
        if not m or int(m.group(2)) != want:
            bad.append('rank %d: deferred gathers %s, want %d' % (
                r, m.group(2) if m else 'not logged', want))
        if not m or int(m.group(1)) != (2 * LAYERS + 1) * STEPS:
            bad.append('rank %d: %s gathers, want %d (the last layer kept gathered)' % (
                r, m.group(1) if m else 'not logged', (2 * LAYERS + 1) * STEPS))
        g = re.search(r'zero wait log: (\d+) gathers started in the update', text)
        if not g or int(g.group(1)) != 2 * (STEPS - 1):
            bad.append('rank %d: %s gathers started in the update, want %d (the embedding '
                       'and layer 0 of every step after the first)' % (
                           r, g.group(1) if g else 'not logged', 2 * (STEPS - 1)))
        sites = re.findall(r'zero wait log: (\w+ \w+) +unit +(\d+): +(\d+) waits', text)
        if not sites:
            bad.append('rank %d: no per-wait log' % r)
        for site, unit, n in sites:
            if site == 'RS grads' and int(unit) != 2:
                bad.append('rank %d: reduce-scatter of unit %s waited for when a gradient '
                           'buffer was taken' % (r, unit))
            if site == 'AG bwd' and int(unit) == LAYERS:
                bad.append('rank %d: the last layer gathered again in backward' % r)
        ends = sorted(int(u) for site, u, n in sites if site == 'RS end' and int(n) == STEPS)
        if ends != [0, 1]:
            bad.append('rank %d: reduce-scatters waited at the end %s, want units [0, 1]'
                       % (r, ends))
        p = re.search(r'peak state ([\d.]+) MB \(plan ([\d.]+) MB\)', text)
        if not p or p.group(1) != p.group(2):
            bad.append('rank %d: state peak %s' % (r, p.groups() if p else 'not logged'))
    worst = max(rel(a['loss'], b['loss']) for a, b in zip(runs[0], ref[0]))
    if worst > 1e-5 or len(runs[0]) != STEPS:
        bad.append('losses differ from --no-prefetch by %.2g' % worst)
    print('schedule: deferred gathers and state peak per rank, losses vs --no-prefetch worst '
          'rel %.2g %s' % (worst, 'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
    return bad


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = len(schedule(rank_bin, data, work))
    failures += one(rank_bin, data, work, 'zero3', ['--zero', '3'])
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
