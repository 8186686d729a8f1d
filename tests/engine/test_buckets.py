#!/usr/bin/env python3
"""test_buckets.py: data-parallel gradient buckets equal the single-rank run
(integration; issue 13).

Model 3 layers, 4 heads, dim 64, seq 32, global batch 16, 6 steps, clipping
at 1.0. One single-rank run is the reference (with step 1's gradients
dumped in canonical layout); then ZeRO-0 worlds whose gradients are
all-reduced in buckets started during backward:
  dp2_unit   --bucket-mb 0.01: one bucket per layer (the head's LayerNorm,
             smaller than a bucket, rides with the last layer), so every
             layer's all-reduce is started while the layers below it still
             compute
  dp4_accum  the same at dp 4 with --grad-accum 2 (buckets start only
             after the last micro-batch's backward)
  dp2_auto   the default size (DDP's 25 MiB spread evenly: this model's
             gradients are well under it, so one bucket)
  dp2_one    --bucket-mb 100: one bucket of every layer and the head
  dp2_z1     ZeRO-1: each unit's reduce-scatter (5 units, the embedding's
             too) started as soon as backward has finished the unit
  dp4_z1_accum  the same at dp 4 with --grad-accum 2
(ZeRO-0 and ZeRO-1 worlds.) Each must: report the same loss and grad norm on every rank, within 1e-5
relative of the single rank at every step (zero_util.equivalence_problems),
step 1's gradient of every tensor within 1e-4 (test_tp.grad_errors), and
log the number of buckets it says, every one of them started during
backward at every step (a run that fell back to one all-reduce after
backward would pass the numbers but not this).

usage: test_buckets.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, run_world  # noqa: E402
from test_tp import grad_errors  # noqa: E402

ARGS = ['--layers', '3', '--heads', '4', '--dim', '64', '--seq', '32', '--batch', '16',
        '--steps', '6', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
        '--dump-steps', '1']
STEPS = 6
TOL_LOSS, TOL_NORM, TOL_GRAD = 1e-5, 1e-5, 1e-4
# (name, dp, extra flags, buckets expected)
CASES = [('dp2_unit', 2, ['--bucket-mb', '0.01'], 3),
         ('dp4_accum', 4, ['--bucket-mb', '0.01', '--grad-accum', '2'], 3),
         ('dp2_auto', 2, [], 1),
         ('dp2_one', 2, ['--bucket-mb', '100'], 1),
         ('dp2_z1', 2, ['--zero', '1'], 5),
         ('dp4_z1_accum', 4, ['--zero', '1', '--grad-accum', '2'], 5)]


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data]
    base_dump = os.path.join(work, 'dump_base')
    base = run_world(rank_bin, args + ['--dump-dir', base_dump], work, 'base', 1)
    if base is None:
        print('FAIL: single-rank run failed')
        return 1
    base = base[0]
    failures = 0
    for name, dp, extra, want_buckets in CASES:
        t0 = time.time()
        dump = os.path.join(work, 'dump_' + name)
        runs = run_world(rank_bin, args + extra + ['--dump-dir', dump], work, name, dp)
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        bad, worst_l, worst_n = equivalence_problems(runs, base, STEPS, TOL_LOSS, TOL_NORM)
        gerr, gname = grad_errors(dump, base_dump)
        if gerr > TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        m = re.search(r'dp gradient buckets: (\d+) .*?, ([0-9.]+) per step started during '
                      r'backward', log_text(work, name, 0))
        got = int(m.group(1)) if m else 0
        early = float(m.group(2)) if m else 0.0
        if got != want_buckets or early != want_buckets:
            bad.append('%d buckets (%.2f per step started during backward), expected %d' %
                       (got, early, want_buckets))
        print('%-10s %.1f s  %d buckets  worst loss rel %.1e  norm rel %.1e  step-1 grad rel '
              '%.1e (%s) %s' % (name, time.time() - t0, got, worst_l, worst_n, gerr, gname,
                                'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
