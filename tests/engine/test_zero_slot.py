#!/usr/bin/env python3
"""test_zero_slot.py: ZeRO-2/3 with the data-parallel group's shared-memory
steps resized (PX_ZERO_SHM_SLOT_BYTES -> px_comm_set_shm_slot at
px_zero_create; integration, issue 13).

Model 3 layers, 4 heads, dim 64, seq 32, global batch 16, 4 steps,
clipping at 1.0; one single-rank run is the reference (step 1's gradients
dumped in canonical layout). Cases:
  z3_1m   dp 2, ZeRO-3, 1 MiB steps (a unit's collectives in one step)
  z2_4k   dp 2, ZeRO-2, 4 KiB steps (many steps per reduce-scatter)
  z3_dp4  dp 4, ZeRO-3, 64 KiB steps
Each must log the size it applied, report the same loss and grad norm on
every rank within 1e-5 relative of the single rank at every step
(zero_util.equivalence_problems) and step 1's gradient of every tensor
within 1e-4 (test_tp.grad_errors). Then PX_ZERO_SHM_SLOT_BYTES=100 (below
a page) must make every rank exit non-zero with an error naming the value.

usage: test_zero_slot.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, run_world  # noqa: E402
from test_tp import grad_errors  # noqa: E402

ARGS = ['--layers', '3', '--heads', '4', '--dim', '64', '--seq', '32', '--batch', '16',
        '--steps', '4', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
        '--dump-steps', '1']
STEPS = 4
TOL_LOSS, TOL_NORM, TOL_GRAD = 1e-5, 1e-5, 1e-4
# (name, dp, zero stage, PX_ZERO_SHM_SLOT_BYTES)
CASES = [('z3_1m', 2, 3, 1 << 20), ('z2_4k', 2, 2, 4096), ('z3_dp4', 4, 3, 65536)]


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
    for name, dp, zero, slot in CASES:
        dump = os.path.join(work, 'dump_' + name)
        os.environ['PX_ZERO_SHM_SLOT_BYTES'] = str(slot)
        runs = run_world(rank_bin, args + ['--zero', str(zero), '--dump-dir', dump], work, name,
                         dp)
        del os.environ['PX_ZERO_SHM_SLOT_BYTES']
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        bad, worst_l, worst_n = equivalence_problems(runs, base, STEPS, TOL_LOSS, TOL_NORM)
        gerr, gname = grad_errors(dump, base_dump)
        if gerr > TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        for r in range(dp):
            if 'shared-memory steps of %d bytes' % slot not in log_text(work, name, r):
                bad.append('rank %d did not log the %d-byte steps' % (r, slot))
        print('%-7s worst loss rel %.1e  norm rel %.1e  step-1 grad rel %.1e (%s) %s' % (
            name, worst_l, worst_n, gerr, gname, 'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    os.environ['PX_ZERO_SHM_SLOT_BYTES'] = '100'
    runs = run_world(rank_bin, args + ['--zero', '3'], work, 'bad_slot', 2, deadline_s=60,
                     expect_fail=True)
    del os.environ['PX_ZERO_SHM_SLOT_BYTES']
    for r in range(2):
        text = log_text(work, 'bad_slot', r)
        if runs is not None or 'PX_ZERO_SHM_SLOT_BYTES=100' not in text or \
                'slot of 100 bytes' not in text:
            print('FAIL bad_slot: rank %d: %s' % (
                r, 'exited 0' if runs is not None else 'error does not name the value: ' +
                text[-400:]))
            failures += 1
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
