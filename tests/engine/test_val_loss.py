#!/usr/bin/env python3
"""test_val_loss.py: the validation loss (engine/eval.h, issue 14) is the same
for every layout that runs it.

Trains a small GPT on Debian's license texts with a validation file (the
same texts shifted: make_tokens.py of the license files in another order)
for 4 steps, evaluating after step 2 and at the end over 3 fixed batches,
as dp=1, dp=2, dp=4, dp=2 with ZeRO-3, dp=2 with grad_accum 2 and tp=2 x
dp=2, and checks:
  * every layout reports a validation loss after steps 2 and 4 and no other;
  * each equals dp=1's within 1e-5 relative;
  * the training losses still match (the evaluation touched no state: a
    run without validation gives bitwise the same training losses).

usage: test_val_loss.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_util  # noqa: E402

TOL = 1e-5


def main():
    rank_bin, make_tokens, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = zero_util.license_tokens(make_tokens, work)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    val = os.path.join(work, 'val.bin')
    subprocess.run([sys.executable, make_tokens, val] + lic[::-1], check=True,
                   stdout=subprocess.DEVNULL)
    base = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
            '--steps', '4', '--data', data, '--lr', '3e-3', '--seed', '77']
    ev = ['--val-data', val, '--eval-every', '2', '--eval-batches', '3']
    cases = [('dp1', 1, []), ('dp2', 2, []), ('dp4', 4, []), ('dp2-zero3', 2, ['--zero', '3']),
             ('dp2-accum2', 2, ['--grad-accum', '2']), ('tp2-dp2', 4, ['--tp', '2'])]
    problems = []
    ref = None
    for tag, world, extra in cases:
        runs = zero_util.run_world(rank_bin, base + ev + extra, work, tag, world)
        if runs is None:
            problems.append('%s: the run failed' % tag)
            continue
        steps = runs[0]
        got = {m['step']: m['val_loss'] for m in steps if 'val_loss' in m}
        print('%-11s val %s  train %s' % (tag, ' '.join('%d:%.7f' % kv for kv in sorted(got.items())),
                                          ' '.join('%.6f' % m['loss'] for m in steps)))
        if sorted(got) != [2, 4]:
            problems.append('%s: validation after steps %s, expected [2, 4]' % (tag, sorted(got)))
            continue
        if ref is None:
            ref = (got, [m['loss'] for m in steps])
            continue
        for s in (2, 4):
            r = abs(got[s] - ref[0][s]) / abs(ref[0][s])
            if r > TOL:
                problems.append('%s: val loss after step %d %.9g vs dp1 %.9g (rel %.2e)'
                                % (tag, s, got[s], ref[0][s], r))
        for s, (a, b) in enumerate(zip([m['loss'] for m in steps], ref[1]), 1):
            if abs(a - b) / abs(b) > TOL:
                problems.append('%s: train loss step %d %.9g vs dp1 %.9g' % (tag, s, a, b))
    # the evaluation leaves the training untouched
    runs = zero_util.run_world(rank_bin, base + ['--zero', '3'], work, 'noval-zero3', 2)
    with_val = zero_util.run_world(rank_bin, base + ev + ['--zero', '3'], work, 'val-zero3', 2)
    if runs is None or with_val is None:
        problems.append('the zero-3 runs with and without validation failed')
    else:
        a = [m['loss'] for m in runs[0]]
        b = [m['loss'] for m in with_val[0]]
        if a != b:
            problems.append('zero-3 training losses change with validation: %s vs %s' % (a, b))
    for p in problems:
        print('FAIL: ' + p)
    if problems:
        return 1
    print('ok: the validation loss agrees across %d layouts (%g relative)' % (len(cases), TOL))
    return 0


if __name__ == '__main__':
    sys.exit(main())
