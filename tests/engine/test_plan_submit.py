#!/usr/bin/env python3
"""test_plan_submit.py: `pctl plan` and `pctl submit` accept the same layouts (unit).

Both read the job flags of one table over the same defaults and check them
with the one validator (planner/jobcfg.h). Each layout below, good and bad,
goes to `pctl plan` and to `pctl submit --dry-run` (the daemon's validator
run by pctl, no daemon: the job's rules and the data file; placement and
memory need a cluster): both exit 0, or both exit 2 naming the same rule.
The bad list holds the layouts the two disagreed on before plan used the
validator: sequence parallelism with seq not divisible by tp (plan checked
the micro-batch's tokens instead), pipeline parallelism with ZeRO 2, zb1
with tp, ep without experts, and sequence parallelism with tp 1 (a no-op
submit accepts, which plan refused).

usage: test_plan_submit.py PCTL WORKDIR"""
import os
import subprocess
import sys

DIMS = ['--layers', '4', '--heads', '4', '--dim', '32', '--seq', '16', '--steps', '2']

GOOD = [
    [],
    ['--dp', '2', '--batch', '8'],
    ['--dp', '2', '--zero', '3', '--batch', '8'],
    ['--tp', '2', '--sequence-parallel'],
    ['--sequence-parallel'],
    ['--pp', '2', '--micro-batches', '4', '--batch', '8'],
    ['--pp', '2', '--micro-batches', '4', '--batch', '8', '--schedule', 'zb1'],
    ['--pp', '2', '--micro-batches', '2', '--batch', '8', '--schedule', 'interleaved',
     '--virtual-stages', '2'],
    ['--pp', '2', '--stage-layers', '3,1'],
    ['--cp', '2', '--dp', '2', '--batch', '8', '--zero', '2'],
    ['--dp', '2', '--ep', '2', '--experts', '4', '--batch', '8'],
    ['--precision', 'bf16', '--dp', '2', '--batch', '8'],
    ['--tp', '2', '--cp', '2', '--sequence-parallel', '--batch', '2'],
]

BAD = [
    (['--heads', '4', '--tp', '3'], 'heads=4 is not divisible by tp=3'),
    # submit's own pre-check names the flags (--batch 16 ... --dp 3), the validator the
    # fields (batch=16 ... dp=3): the same rule
    (['--dp', '3', '--batch', '16'], '16 is not divisible by'),
    (['--tp', '2', '--sequence-parallel', '--seq', '15', '--batch', '2'],
     'seq=15 is not divisible by tp=2'),
    (['--pp', '8'], 'layers=4 is fewer than pp=8'),
    (['--pp', '2', '--zero', '2'], 'zero=2 with pp=2'),
    (['--pp', '2', '--schedule', 'zb1', '--tp', '2'], 'schedule zb1 with tp=2'),
    (['--ep', '2', '--dp', '2', '--batch', '8'], 'ep=2 needs experts'),
    (['--dp', '4', '--ep', '4', '--experts', '6', '--batch', '8'],
     'experts=6 is not divisible by ep=4'),
    (['--cp', '2', '--seq', '18'], 'seq=18 is not divisible by 2 x cp=2'),
    (['--virtual-stages', '2', '--pp', '2'], 'virtual_stages=2 with schedule 1f1b'),
    (['--pp', '2', '--schedule', 'interleaved', '--virtual-stages', '3'],
     'interleaved'),
    (['--pp', '2', '--stage-layers', '3,2'], 'stage'),
    (['--tp', '8', '--heads', '8', '--dim', '64', '--seq', '24', '--cp', '2',
      '--sequence-parallel', '--batch', '1'],
     'a micro-batch of 1 x seq=24/cp=2 tokens per rank is not divisible by tp=8'),
    (['--zero', '4'], 'zero=4 must be 0, 1, 2 or 3'),
    (['--precision', 'fp64'], "--precision 'fp64'"),
    (['--dp', '0'], "'0' for --dp"),
]


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    return p.returncode, p.stderr.strip()


def main():
    pctl, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    text = os.path.join(work, 'corpus.txt')
    data = os.path.join(work, 'tokens.bin')
    with open(text, 'w') as f:
        f.write('the plan and the submit accept the same layouts. ' * 200)
    subprocess.run([pctl, 'data', 'prepare', '--text', text, '--out', data], check=True,
                   capture_output=True)
    failures = 0
    cases = [(g, None) for g in GOOD] + BAD
    for extra, want in cases:
        argv = DIMS + extra
        prc, perr = run([pctl, 'plan'] + argv)
        src, serr = run([pctl, 'submit', '--dry-run', '--data', data] + argv)
        want_rc = 0 if want is None else 2
        ok = prc == src == want_rc
        if want is not None:
            ok = ok and want in perr and want in serr
        print('%-80s plan %d submit %d %s' % (' '.join(extra) or '(defaults)', prc, src,
                                              'ok' if ok else 'FAIL\n  plan: %s\n  submit: %s'
                                              % (perr, serr)))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS (%d layouts)' % len(cases))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
