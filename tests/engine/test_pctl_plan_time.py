#!/usr/bin/env python3
"""test_pctl_plan_time.py: `pctl plan --cluster` and `--search` (unit).

--cluster PRESET:NxG adds the predicted step (planner/steptime.h) to plan's
output: a "time on" line, or with --json a "time" object whose costs sum to
the step and whose tokens/s is batch x seq / step; the memory figures stay
as without it. An INI file describes a cluster too; bad clusters, engines
and flags are usage errors (exit 2) naming the value. --search lists at most
--top layouts of all the cluster's devices, fastest first, each fitting the
device's memory. And the search on Megatron-LM's GPT-3 175B run
(Narayanan et al. 2021, arXiv 2104.04473, Table 2, PTD-P: 174.6B, 96
layers, hidden 12288, 96 heads, 1536 A100 80GB, batch 1536, 141 TFLOP/s per
GPU by the paper's equation (3), which counts the recomputed forward),
priced as Megatron-LM ran (--engine megatron), ranks first or second a
layout predicted within 10% of the tokens/s Megatron measured.

usage: test_pctl_plan_time.py PCTL"""
import json
import os
import subprocess
import sys
import tempfile

SMALL = ['--layers', '4', '--heads', '4', '--dim', '128', '--seq', '128', '--batch', '16']


def run(pctl, args):
    return subprocess.run([pctl, 'plan'] + args, capture_output=True, text=True, timeout=120)


def main():
    pctl = sys.argv[1]
    fails = 0

    def check(cond, what):
        nonlocal fails
        print(('ok   ' if cond else 'FAIL ') + what)
        fails += not cond

    # the step on a preset, text and JSON; the memory figures unchanged
    base = run(pctl, SMALL + ['--dp', '2', '--tp', '2', '--device', 'cuda', '--json'])
    r = run(pctl, SMALL + ['--dp', '2', '--tp', '2', '--cluster', 'h100-sxm:1x4', '--json'])
    check(r.returncode == 0, 'plan --cluster h100-sxm:1x4 --json exits 0: %s' % r.stderr[-300:])
    j = json.loads(r.stdout)
    jb = json.loads(base.stdout)
    t = j.get('time', {})
    check(j['stages'] == jb['stages'], 'the memory figures are those of --device cuda')
    check('time' not in jb, 'no time without --cluster')
    check(t.get('step_s', 0) > 0 and abs(t['tokens_per_s'] * t['step_s'] - 16 * 128) < 1e-6 * 2048,
          'tokens/s = batch x seq / step (%s)' % t.get('tokens_per_s'))
    check(abs(sum(t['costs'].values()) - t['step_s']) < 1e-6 * t['step_s'],
          'the costs sum to the step (to the JSON figures\' 9 digits)')
    check(len(t['largest_costs']) == 3 and 0 < t['mfu'] < 1, 'three largest costs, MFU in (0,1)')
    out = run(pctl, SMALL + ['--dp', '2', '--tp', '2', '--cluster', 'h100-sxm:1x4']).stdout
    line = [ln for ln in out.splitlines() if ln.startswith('time on h100-sxm:1x4')]
    check(len(line) == 1 and 'tokens/s' in line[0] and 'largest costs:' in line[0],
          'the text output ends with the time line: %s' % (line[:1]))

    # an INI file; bad input is a usage error naming it
    with tempfile.TemporaryDirectory() as d:
        ini = os.path.join(d, 'c.ini')
        with open(ini, 'w') as f:
            f.write('[cluster]\npreset = a100-sxm-80g\nnodes = 2\ndevices_per_node = 2\n'
                    '[inter]\nbandwidth_gbps = 12.5\n')
        r = run(pctl, SMALL + ['--dp', '4', '--cluster', ini])
        check(r.returncode == 0 and 'time on ' + ini in r.stdout, 'an INI cluster: %s' % r.stderr)
        with open(ini, 'w') as f:
            f.write('[device]\nfoo = 1\n')
        r = run(pctl, SMALL + ['--cluster', ini])
        check(r.returncode == 2 and "unknown key 'foo'" in r.stderr and ':2:' in r.stderr,
              'an unknown key: exit 2 naming it and its line: %s' % r.stderr.strip())
    for args, want in ((['--cluster', 'h100-sxm:0x8'], 'h100-sxm:0x8'),
                       (['--cluster', 'tpu:1x8'], 'h200-sxm'),
                       (['--search'], '--cluster'),
                       (['--cluster', 'h100-sxm:1x8', '--engine', 'deepspeed'], 'deepspeed'),
                       (['--dp', '16', '--cluster', 'h100-sxm:1x8'], 'world=16')):
        r = run(pctl, SMALL + args)
        check(r.returncode == 2 and want in r.stderr,
              '%s: exit 2 naming %s (%d: %s)' % (' '.join(args), want, r.returncode,
                                                 r.stderr.strip()[-200:]))

    # the search: at most --top layouts of all 8 devices, fastest first, fitting
    r = run(pctl, SMALL + ['--cluster', 'h100-sxm:2x4', '--search', '--top', '5', '--json'])
    check(r.returncode == 0, 'search exits 0: %s' % r.stderr[-300:])
    s = json.loads(r.stdout)['search']
    tps = [x['tokens_per_s'] for x in s]
    check(0 < len(s) <= 5, '%d layouts listed (top 5)' % len(s))
    check(all(x['layout']['dp'] * x['layout']['tp'] * x['layout']['pp'] * x['layout']['cp'] == 8
              for x in s), 'each uses the 8 devices')
    check(tps == sorted(tps, reverse=True), 'fastest first')
    check(all(x['fits'] and x['memory_per_rank_bytes'] <= 80e9 for x in s), 'each fits memory')

    # GPT-3 175B on 1536 A100: Megatron-LM's measured throughput
    h, l, sq, V, B = 12288, 96, 2048, 51200, 1536
    flops = 96 * B * sq * l * h * h * (1 + sq / (6 * h) + V / (16 * l * h))  # equation (3)
    measured = 141e12 * 1536 / (flops / (B * sq))  # tokens/s
    r = run(pctl, ['--layers', str(l), '--heads', '96', '--dim', str(h), '--seq', str(sq),
                   '--vocab', str(V), '--batch', str(B), '--precision', 'bf16',
                   '--cluster', 'a100-sxm-80g:192x8', '--search', '--engine', 'megatron',
                   '--json'])
    check(r.returncode == 0, '175B search exits 0: %s' % r.stderr[-300:])
    s = json.loads(r.stdout)['search']
    print('GPT-3 175B, 1536 A100, batch 1536: Megatron-LM measured %.0f tokens/s '
          '(141 TFLOP/s per GPU, tp 8, pp 12, dp 16; arXiv 2104.04473 Table 2)' % measured)
    print('  #  dp  tp  pp  schedule      m  predicted tokens/s  vs measured')
    for i, x in enumerate(s[:5]):
        lay = x['layout']
        print('  %d %3d %3d %3d  %-11s %4d  %18.0f  %+6.1f%%' % (
            i + 1, lay['dp'], lay['tp'], lay['pp'], x['schedule'], x['micro_batches'],
            x['tokens_per_s'], 100 * (x['tokens_per_s'] / measured - 1)))
    close = [i for i, x in enumerate(s[:2]) if abs(x['tokens_per_s'] / measured - 1) <= 0.10]
    check(bool(close), 'the first or second layout within 10% of the measured throughput')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
