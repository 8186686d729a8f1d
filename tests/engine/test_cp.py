#!/usr/bin/env python3
"""test_cp.py: context parallelism (ring attention, --cp) equals the
single-rank run (integration; issue 11).

Model: 4 layers, 4 heads, dim 32, seq 32 (cp 4: 8 chunks of 4 tokens),
global batch 8, 10 steps, fp32, causal, clip 1.0, the same seed and data
for every layout. One single-rank run is the reference; each layout runs
through the standalone bootstrap. Checks, per layout:
  * every rank reports the same loss and grad norm at every step, within
    1e-5 relative of the single rank (zero_util.equivalence_problems);
  * step 1's gradient gathered to the canonical layout (--dump-dir) within
    1e-4 relative of the single rank's, tensor by tensor: wpe's rows are
    written by two chunks per rank, the k/v weights by every rank's queries;
  * the norm of ones (--test-norm-ones) is exactly sqrt(parameters): the
    replicated parameters' gradients are reduced over dp x cp once;
  * the ring moved data and the log reports the share of it hidden.
Layout `resume`: a cp 2 x ZeRO-1 run of 6 steps checkpoints at step 3
(ZeRO shards over dp x cp); resumed on one rank, on cp 2 and on dp 2 x cp 2
ZeRO-1, steps 4-6 give the uninterrupted run's losses within 1e-5.
usage: test_cp.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]
LAYOUT: cp2, cp4, cp2tp2, dp2cp2, dp2cp2z1, cp2tp2sp, cp2z2, dp2cp2z3a2, cp2pp2,
cp2pp2zb1, cp2pp2int2, dp2cp2pp2z1, resume (all by default; sp: with
sequence parallelism; z3a2 is ZeRO-3 with 2 micro-batches; pp2: 2 pipeline
stages, 1f1b (zb1, interleaved with 2 chunks per stage) with 4
micro-batches, gpipe with 2)."""
import math
import os
import re
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, rel, run_world  # noqa: E402
from test_tp import grad_errors, norm_ones  # noqa: E402

ARGS = ['--layers', '4', '--heads', '4', '--dim', '32', '--seq', '32', '--batch', '8',
        '--steps', '10', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0']
TOL_LOSS = TOL_NORM = 1e-5
TOL_GRAD = 1e-4
LAYOUTS = {  # name: (world, extra args)
    'cp2': (2, ['--cp', '2']),
    'cp4': (4, ['--cp', '4']),
    'cp2tp2': (4, ['--cp', '2', '--tp', '2']),
    'dp2cp2': (4, ['--dp', '2', '--cp', '2']),
    'dp2cp2z1': (4, ['--dp', '2', '--cp', '2', '--zero', '1']),
    'cp2tp2sp': (4, ['--cp', '2', '--tp', '2', '--sequence-parallel']),
    'cp2z2': (2, ['--cp', '2', '--zero', '2']),
    'cp2pp2': (4, ['--cp', '2', '--pp', '2', '--micro-batches', '4', '--schedule', '1f1b']),
    'cp2pp2zb1': (4, ['--cp', '2', '--pp', '2', '--micro-batches', '4', '--schedule', 'zb1']),
    'cp2pp2int2': (4, ['--cp', '2', '--pp', '2', '--micro-batches', '4', '--schedule',
                       'interleaved', '--virtual-stages', '2']),
    'dp2cp2pp2z1': (8, ['--dp', '2', '--cp', '2', '--pp', '2', '--micro-batches', '2',
                        '--schedule', 'gpipe', '--zero', '1']),
    'dp2cp2z3a2': (4, ['--dp', '2', '--cp', '2', '--zero', '3', '--grad-accum', '2']),
}


def resume_check(rank_bin, data, work):
    """cp checkpoints: a cp 2 run's step-3 checkpoint resumed on other
    layouts; returns the problems found"""
    args = ARGS[:ARGS.index('--steps')] + ['--steps', '6'] + \
        ARGS[ARGS.index('--steps') + 2:] + ['--data', data]
    ck = os.path.join(work, 'ck')
    full = run_world(rank_bin, args + ['--cp', '2', '--zero', '1', '--checkpoint-every', '3',
                                       '--checkpoint-dir', ck], work, 'ck_full', 2)
    if full is None:
        return ['the checkpointing cp 2 run failed']
    bad = []
    for tag, world, extra in (('ck_r1', 1, []), ('ck_cp2', 2, ['--cp', '2']),
                              ('ck_dp2cp2', 4, ['--dp', '2', '--cp', '2', '--zero', '1'])):
        runs = run_world(rank_bin, args + extra + ['--resume', os.path.join(ck, 'step_3')],
                         work, tag, world)
        if runs is None:
            bad.append('%s: a rank failed' % tag)
            continue
        steps = [m['step'] for m in runs[0]]
        worst = max(rel(m['loss'], full[0][m['step'] - 1]['loss']) for m in runs[0])
        print('resume %-10s steps %s, worst loss rel %.1e' % (tag, steps, worst))
        if steps != [4, 5, 6] or not worst <= TOL_LOSS:
            bad.append('%s: steps %s, loss rel %.1e' % (tag, steps, worst))
    return bad


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    names = sys.argv[4:] or list(LAYOUTS) + ['resume']
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data, '--dump-steps', '1']
    failures = 0
    base_dump = os.path.join(work, 'dump_base')
    base = run_world(rank_bin, args + ['--dump-dir', base_dump], work, 'base', 1)
    if base is None:
        print('FAIL: single-rank run failed')
        return 1
    base = base[0]
    if base[-1]['loss'] > base[0]['loss'] - 0.2:
        print('FAIL: no progress %.4f -> %.4f' % (base[0]['loss'], base[-1]['loss']))
        failures += 1
    r = norm_ones(rank_bin, args, work, 'ones_base', 1)
    want = None if r is None else struct.unpack('f', struct.pack('f', math.sqrt(r[1])))[0]
    for name in names:
        if name == 'resume':
            bad = resume_check(rank_bin, data, work)
            print('resume    %s' % ('ok' if not bad else 'FAIL: ' + '; '.join(bad)))
            failures += len(bad)
            continue
        world, extra = LAYOUTS[name]
        t0 = time.time()
        dump = os.path.join(work, 'dump_' + name)
        runs = run_world(rank_bin, args + extra + ['--dump-dir', dump], work, name, world)
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        bad, worst_l, worst_n = equivalence_problems(runs, base, 10, TOL_LOSS, TOL_NORM)
        gerr, gname = grad_errors(dump, base_dump)
        if not gerr <= TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        m = re.search(r'cp \d+: ring attention .*?([\d.]+) MB sent.*?(\d+)% of ring',
                      log_text(work, name, 0))
        if not m or not float(m.group(1)) > 0:
            bad.append('no ring attention report in rank 0\'s log')
        # one micro-batch: the state averages the accumulation (1/(A x M)),
        # which would scale the ones (as test_pp.py)
        # (interleaved needs micro-batches a multiple of pp: 2 of them, the
        # ones then scaled by 1/2, exactly, as test_pp.py)
        inter = 'interleaved' in extra
        one = [(('2' if inter and extra[i - 1] == '--micro-batches' else '1')
                if i > 0 and extra[i - 1] in ('--micro-batches', '--grad-accum') else a)
               for i, a in enumerate(extra)]
        r = norm_ones(rank_bin, args + one, work, 'ones_' + name, world)
        want_l = None if want is None else want / (2 if inter else 1)
        if r is None or want_l is None or r[0] != want_l:
            bad.append('norm-ones %s, want sqrt(params) = %s' % (r, want_l))
        print('%-9s %.1f s  worst loss rel %.1e  norm rel %.1e  step-1 grad rel %.1e (%s)  '
              'ring hidden %s%%  %s' % (name, time.time() - t0, worst_l, worst_n, gerr, gname,
                                         m.group(2) if m else '?',
                                         'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
