#!/usr/bin/env python3
"""test_plan_engine.py: `pctl plan` per rank is the plan the engine lays out (integration).

For each layout (dp with ZeRO 1-3, tp + sequence parallelism, pp with 1F1B,
zb1 and interleaved, cp, experts over ep, bf16, a cp x dp ZeRO-3 mix, tp
with bf16 on the simulated device) a
standalone world of parallax-rank trains one step; every rank reports its
plan by category in its metrics (the figures `pctl mem` shows as "plan"),
and rank 0 logs its "plan per rank" line. The plan of that rank's ZeRO
stage and pipeline stage from `pctl plan --json` with the same flags must
be equal: parameters, gradients, optimizer state, their peak at once, and
the activation buffers, to the byte; the log line to its two decimals.

usage: test_plan_engine.py PARALLAX_RANK PCTL MAKE_TOKENS WORKDIR"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, log_text, run_world  # noqa: E402

DIMS = ['--layers', '4', '--heads', '4', '--dim', '32', '--seq', '16', '--steps', '1']

# (name, world, flags)
CASES = [
    ('dp2z1', 2, ['--dp', '2', '--batch', '4', '--zero', '1']),
    ('dp2z2', 2, ['--dp', '2', '--batch', '4', '--zero', '2']),
    ('dp2z3', 2, ['--dp', '2', '--batch', '4', '--zero', '3']),
    ('tp2sp', 2, ['--tp', '2', '--sequence-parallel', '--batch', '2', '--zero', '0']),
    ('pp2', 2, ['--pp', '2', '--micro-batches', '4', '--batch', '4', '--zero', '1',
                '--stage-layers', '3,1']),
    ('pp2zb1', 2, ['--pp', '2', '--micro-batches', '2', '--batch', '4', '--schedule', 'zb1',
                   '--zero', '0']),
    ('pp2int', 2, ['--pp', '2', '--micro-batches', '2', '--batch', '4', '--schedule',
                   'interleaved', '--virtual-stages', '2', '--zero', '0']),
    ('cp2', 2, ['--cp', '2', '--batch', '2', '--zero', '3']),
    ('moe', 2, ['--dp', '2', '--ep', '2', '--experts', '4', '--moe-every', '2', '--batch', '4',
                '--zero', '1']),
    ('bf16', 2, ['--dp', '2', '--batch', '4', '--zero', '2', '--precision', 'bf16']),
    ('dp2cp2z3', 4, ['--dp', '2', '--cp', '2', '--batch', '4', '--zero', '3']),
    # the simulated device (its buffers device memory, the cpu ops): pctl plan
    # and parallax-rank both take --device
    ('sim_tp2bf16', 2, ['--tp', '2', '--batch', '2', '--zero', '1', '--precision', 'bf16',
                        '--device', 'sim']),
]

CATS = (('params', 'params_bytes'), ('grads', 'grads_bytes'), ('optimizer', 'optimizer_bytes'),
        ('activations', 'activations_bytes'))
LINE = re.compile(r'plan per rank: params ([0-9.]+) MB, grads ([0-9.]+) MB, optimizer '
                  r'([0-9.]+) MB, activations ([0-9.]+) MB')


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:5]
    only = sys.argv[5:]
    os.makedirs(work, exist_ok=True)
    os.environ['PX_SIM_DEVICE'] = '1'  # the simulated device is for tests (px_kernels_select)
    data = license_tokens(make_tokens, work)
    failures = 0
    for name, world, flags in CASES:
        if only and name not in only:
            continue
        plan = json.loads(subprocess.run([pctl, 'plan'] + DIMS + flags + ['--json'], check=True,
                                         capture_output=True, text=True).stdout)
        runs = run_world(rank_bin, DIMS + flags + ['--data', data], work, name, world)
        if runs is None:
            print('%s: FAIL: a rank failed' % name)
            failures += 1
            continue
        pp = plan['pp']
        bad = []
        for r, rr in enumerate(runs):
            stage = r // (world // pp)  # pp outermost (layout.h)
            want = [s for s in plan['stages'] if s['pipeline_stage'] == stage]
            mem = rr[-1]['memory']
            if len(want) != 1:
                bad.append('rank %d: %d plan rows for stage %d' % (r, len(want), stage))
                continue
            for cat, key in CATS:
                if mem[cat]['plan'] != want[0][key]:
                    bad.append('rank %d %s: engine %r, pctl plan %r' % (r, cat, mem[cat]['plan'],
                                                                      want[0][key]))
            if mem['plan_state_peak'] != want[0]['state_peak_bytes']:
                bad.append('rank %d at once: engine %r, pctl plan %r' % (
                    r, mem['plan_state_peak'], want[0]['state_peak_bytes']))
        m = LINE.search(log_text(work, name, 0))
        row0 = [s for s in plan['stages'] if s['pipeline_stage'] == 0][0]
        logged = m and [m.group(i) for i in range(1, 5)]
        planned = ['%.2f' % (row0[k] / 1e6) for _, k in CATS]
        if logged != planned:
            bad.append('rank 0 log %s, pctl plan %s' % (logged, planned))
        if 'the plan says' in log_text(work, name, 0):
            bad.append('the engine warned that its buffers differ from the plan')
        print('%-9s %d ranks: params %s, activations %s bytes (rank 0): %s' % (
            name, world, row0['params_bytes'], row0['activations_bytes'],
            'ok' if not bad else 'FAIL\n  ' + '\n  '.join(bad)))
        failures += bool(bad)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
