#!/usr/bin/env python3
"""test_zero.py: ZeRO stages 0-3 equal the single-rank run (integration).

Model with odd unit sizes (3 layers, 3 heads, dim 33, seq 32: 50061
parameters, not divisible by 2 or 4, so every shard is padded), global batch
16, 10 steps, clipping at 1.5 (fires on the first steps: the test checks it
does). One single-rank run (accumulation 1) is the reference; then ZeRO 0, 1,
2, 3 x dp 2, 4 x accumulation 1, 4 (16 worlds). Checks at each of the 10
steps:
  * every rank reports the same loss and grad norm,
  * loss and grad norm within 1e-5 relative of the single-rank run,
and that ZeRO-1 dp=4 matches ZeRO-0 dp=4 within 1e-5 (parameter count not
divisible by 4), and that ranks hold what the plan says: stage >= 1 peak
optimizer bytes = padded shard x 8.

usage: test_zero.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, rel, run_world  # noqa: E402

ARGS = ['--layers', '3', '--heads', '3', '--dim', '33', '--seq', '32', '--batch', '16',
        '--steps', '10', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.5']
NPARAMS = 50061
UNITS = [256 * 33 + 32 * 33 + 2 * 33] + [12 * 33 * 33 + 13 * 33] * 3
TOL = 1e-5


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data]
    failures = 0
    assert sum(UNITS) == NPARAMS and NPARAMS % 4 and NPARAMS % 2
    base = run_world(rank_bin, args, work, 'base', 1)
    if base is None:
        print('FAIL: single-rank run failed')
        return 1
    base = base[0]
    fired = [m['step'] for m in base if m['grad_norm'] > 1.5]
    print('single rank: clipping fires at steps %s' % fired)
    if not fired or len(fired) == len(base):
        print('FAIL: clipping should fire on some steps, not all')
        failures += 1
    if base[-1]['loss'] > base[0]['loss'] - 0.2:
        print('FAIL: no progress %.4f -> %.4f' % (base[0]['loss'], base[-1]['loss']))
        failures += 1
    results = {}
    for dp in (2, 4):
        for zero in (0, 1, 2, 3):
            for accum in (1, 4):
                tag = 'z%d_dp%d_a%d' % (zero, dp, accum)
                t0 = time.time()
                runs = run_world(rank_bin, args + ['--zero', str(zero), '--grad-accum',
                                                   str(accum)], work, tag, dp)
                if runs is None:
                    print('FAIL %s: a rank failed' % tag)
                    failures += 1
                    continue
                results[tag] = runs[0]
                worst_l = worst_n = 0.0
                bad = []
                for r, rr in enumerate(runs):
                    if [(m['loss'], m['grad_norm']) for m in rr] != \
                            [(m['loss'], m['grad_norm']) for m in runs[0]]:
                        bad.append('rank %d differs from rank 0' % r)
                if len(runs[0]) != 10:
                    bad.append('%d steps reported' % len(runs[0]))
                for a, b in zip(runs[0], base):
                    worst_l = max(worst_l, rel(a['loss'], b['loss']))
                    worst_n = max(worst_n, rel(a['grad_norm'], b['grad_norm']))
                if worst_l > TOL or worst_n > TOL:
                    bad.append('loss rel %.1e, norm rel %.1e > %g' % (worst_l, worst_n, TOL))
                # the optimizer state per rank is what the plan lays out
                mem = runs[0][-1]['memory']
                shard = sum((u + dp - 1) // dp for u in UNITS)
                want_opt = 8 * (shard if zero >= 1 else sum((u + dp - 1) // dp * dp
                                                            for u in UNITS))
                if mem['optimizer']['peak'] != want_opt:
                    bad.append('optimizer peak %d bytes, expected %d' %
                               (mem['optimizer']['peak'], want_opt))
                print('%-11s %.1f s  worst loss rel %.1e  norm rel %.1e  state peak %d B %s' % (
                    tag, time.time() - t0, worst_l, worst_n, mem['state_peak'],
                    'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
                failures += len(bad)
    a, b = results.get('z1_dp4_a1'), results.get('z0_dp4_a1')
    if a and b:
        w = max(max(rel(x['loss'], y['loss']), rel(x['grad_norm'], y['grad_norm']))
                for x, y in zip(a, b))
        print('ZeRO-1 dp=4 vs ZeRO-0 dp=4 (%d params, %% 4 = %d): worst rel %.1e %s' % (
            NPARAMS, NPARAMS % 4, w, 'ok' if w <= TOL else 'FAIL'))
        failures += w > TOL
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
