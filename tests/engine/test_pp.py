#!/usr/bin/env python3
"""test_pp.py: pipeline parallelism (GPipe, 1F1B, ZB-H1) equals the single-rank run
(integration; issue 10).

Model: 2 layers (6 for pp 4, 4 for interleaved), 4 heads, dim 32, seq 16, global batch 8 (32
for the micro-batch pair), 10 steps, clip 1.0, same seed and data for every
layout; one single-rank run per model and batch is the reference. The
ranks run through the standalone bootstrap. Checks, per layout:
  * every rank reports the same loss and grad norm at every step;
  * loss and grad norm within 1e-5 relative of the single rank, each step;
  * step 1's gradient, gathered to the canonical layout (--dump-dir), within
    1e-4 relative of the single rank's, tensor by tensor;
  * the two copies of the tied embedding (first and last stage of each
    dp / tp index) are bitwise equal after every step (tied_digest);
  * each stage reports busy > 0 and idle >= 0 seconds per step;
  * the norm of ones (--test-norm-ones): every parameter counted once, the
    tied wte too, so the norm is exactly sqrt(number of parameters);
  * the parameters the stages hold add up to the single-rank model's plus
    the one copy of the embedding unit on the last stage (pp4, dp 1,
    ZeRO 0), so each stage holds only its units;
  * stage 0 of 1F1B holds half GPipe's activation bytes at pp 2 with 4
    micro-batches (2 slots vs 4), stage 1 a quarter (1 vs 4);
  * mb4x8 and mb16x2 (global batch 32 as 4 micro-batches of 8 and as 16 of
    2) give the same loss and grad norm within 1e-5 of each other.
  * with --pctl PCTL: every stage's measured activation peak equals
    `pctl plan --json`'s pipeline figure for its schedule (GPipe, 1F1B,
    ZB1 at pp 4, 8 micro-batches of 2, 6 layers, dim 64; interleaved
    V 2 at pp 2, the pp2int2 run).
  * interleaved 1F1B (pp2int2, dp2pp2int2, with ZeRO 1, with tp 2): pp 2
    with 2 chunks per stage of one layer each, every check above.
usage: test_pp.py RANK_BIN MAKE_TOKENS_PY WORKDIR [--pctl PCTL] [LAYOUT ...]"""
import json
import os
import re
import subprocess
import struct
import sys
import time
import math

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, rel, run_world  # noqa: E402
from test_tp import grad_errors  # noqa: E402

TOL_LOSS = TOL_NORM = 1e-5
TOL_GRAD = 1e-4
# name: (world, dp, tp, pp, layers, batch, extra args)
LAYOUTS = {
    'pp2gpipe': (2, 1, 1, 2, 2, 8, ['--pp', '2', '--micro-batches', '4', '--schedule', 'gpipe']),
    'pp2_1f1b': (2, 1, 1, 2, 2, 8, ['--pp', '2', '--micro-batches', '4', '--schedule', '1f1b']),
    'pp2zb1': (2, 1, 1, 2, 2, 8, ['--pp', '2', '--micro-batches', '4', '--schedule', 'zb1']),
    'pp4zb1': (4, 1, 1, 4, 6, 8, ['--pp', '4', '--micro-batches', '8', '--schedule', 'zb1']),
    'pp4': (4, 1, 1, 4, 6, 8, ['--pp', '4', '--micro-batches', '4', '--schedule', '1f1b']),
    'pp4split': (4, 1, 1, 4, 6, 8, ['--pp', '4', '--micro-batches', '2', '--schedule', 'gpipe',
                                    '--stage-layers', '1,1,2,2']),
    'dp2pp2': (4, 2, 1, 2, 2, 8, ['--dp', '2', '--pp', '2', '--micro-batches', '2']),
    'dp4pp2': (8, 4, 1, 2, 2, 8, ['--dp', '4', '--pp', '2', '--micro-batches', '2']),
    'dp2pp2z1': (4, 2, 1, 2, 2, 8, ['--dp', '2', '--pp', '2', '--micro-batches', '2',
                                    '--zero', '1']),
    'pp2tp2': (4, 1, 2, 2, 2, 8, ['--pp', '2', '--tp', '2', '--micro-batches', '2']),
    'pp2a2': (2, 1, 1, 2, 2, 8, ['--pp', '2', '--micro-batches', '2', '--grad-accum', '2']),
    'mb4x8': (2, 1, 1, 2, 2, 32, ['--pp', '2', '--micro-batches', '4']),
    'mb16x2': (2, 1, 1, 2, 2, 32, ['--pp', '2', '--micro-batches', '16']),
    # interleaved 1F1B: 4 layers as 4 chunks of 1, stage 0 holding layers 0
    # and 2, stage 1 layers 1 and 3
    'pp2int2': (2, 1, 1, 2, 4, 8, ['--pp', '2', '--micro-batches', '4', '--schedule',
                                   'interleaved', '--virtual-stages', '2']),
    'dp2pp2int2': (4, 2, 1, 2, 4, 8, ['--dp', '2', '--pp', '2', '--micro-batches', '2',
                                      '--schedule', 'interleaved', '--virtual-stages', '2']),
    'dp2pp2int2z1': (4, 2, 1, 2, 4, 8, ['--dp', '2', '--pp', '2', '--micro-batches', '2',
                                        '--schedule', 'interleaved', '--virtual-stages', '2',
                                        '--zero', '1']),
    # 8 layers on pp 4 x V 2 (the activations wrap from stage 3 to stage 0),
    # 6 on pp 2 x V 3
    'pp4int2': (4, 1, 1, 4, 8, 8, ['--pp', '4', '--micro-batches', '8', '--schedule',
                                   'interleaved', '--virtual-stages', '2']),
    'pp2int3': (2, 1, 1, 2, 6, 8, ['--pp', '2', '--micro-batches', '4', '--schedule',
                                   'interleaved', '--virtual-stages', '3']),
    'pp2tp2int2': (4, 1, 2, 2, 4, 8, ['--pp', '2', '--tp', '2', '--micro-batches', '2',
                                      '--schedule', 'interleaved', '--virtual-stages', '2']),
}


def args_of(data, layers, batch):
    return ['--layers', str(layers), '--heads', '4', '--dim', '32', '--seq', '16', '--batch',
            str(batch), '--steps', '10', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
            '--data', data, '--dump-steps', '1', '--replica-digests']


def norm_ones(rank_bin, args, work, tag, world):
    runs = run_world(rank_bin, args + ['--test-norm-ones'], work, tag, world)
    if runs is None:
        return None
    m = re.search(r'norm-ones (\S+) params (\d+)', log_text(work, tag, 0))
    if not m:
        return None
    return struct.unpack('f', struct.pack('f', float(m.group(1))))[0], int(m.group(2))


def plan_check(rank_bin, pctl, data, work):
    dims = ['--layers', '6', '--heads', '4', '--dim', '64', '--seq', '32']
    plan = json.loads(subprocess.run(
        [pctl, 'plan'] + dims + ['--pp', '4', '--micro-batches', '8', '--batch', '16',
                                 '--json'], check=True, capture_output=True,
        text=True).stdout)['pipeline']
    bad = 0
    for sched in ('gpipe', '1f1b', 'zb1'):
        runs = run_world(rank_bin, dims + ['--batch', '16', '--steps', '2', '--data', data,
                                           '--pp', '4', '--micro-batches', '8', '--schedule',
                                           sched], work, 'plan_' + sched, 4)
        want = [int(st['activation_bytes']) for st in plan[sched]]
        got = runs and [rr[-1]['memory']['activations']['peak'] for rr in runs]
        ok = got == want
        print('activation peak per stage, %-5s measured %s, pctl plan %s %s' % (
            sched, got, want, 'ok' if ok else 'FAIL'))
        bad += not ok
    return bad


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    rest = sys.argv[4:]
    pctl = None
    if rest[:1] == ['--pctl']:
        pctl, rest = rest[1], rest[2:]
    names = rest or list(LAYOUTS)
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = 0
    bases = {}
    results = {}
    acts = {}
    for name in names:
        world, dp, tp, pp, layers, batch, extra = LAYOUTS[name]
        args = args_of(data, layers, batch)
        key = (layers, batch)
        if key not in bases:
            bdump = os.path.join(work, 'dump_base_%d_%d' % key)
            b = run_world(rank_bin, args + ['--dump-dir', bdump], work, 'base_%d_%d' % key, 1)
            if b is None:
                print('FAIL: single-rank run (%d layers, batch %d) failed' % key)
                return 1
            bases[key] = (b[0], bdump)
        base, base_dump = bases[key]
        t0 = time.time()
        dump = os.path.join(work, 'dump_' + name)
        runs = run_world(rank_bin, args + extra + ['--dump-dir', dump], work, name, world)
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        results[name] = runs[0]
        acts[name] = [rr[-1]['memory']['activations']['peak'] for rr in runs]
        bad, worst_l, worst_n = equivalence_problems(runs, base, 10, TOL_LOSS, TOL_NORM)
        gerr, gname = grad_errors(dump, base_dump)
        if not gerr <= TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        # rank order (layout.h): tp innermost, then dp, pp outermost
        per_stage = dp * tp
        for i in range(per_stage):
            first, last = runs[i], runs[(pp - 1) * per_stage + i]
            if first[0].get('pp_stage') != 0 or last[0].get('pp_stage') != pp - 1:
                bad.append('stage numbers %s %s' % (first[0].get('pp_stage'),
                                                    last[0].get('pp_stage')))
                break
            for step in range(len(first)):
                if first[step]['tied_digest'] == '0' * 16:  # --replica-digests computes it
                    bad.append('step %d: no tied digest' % (step + 1))
                    break
                if first[step]['tied_digest'] != last[step]['tied_digest']:
                    bad.append('step %d: the tied wte copies differ (%s vs %s)' % (
                        step + 1, first[step]['tied_digest'], last[step]['tied_digest']))
                    break
        for rk, rr in enumerate(runs):
            if not all(m['pp_busy_s'] > 0 and m['pp_idle_s'] >= 0 for m in rr):
                bad.append('rank %d: busy/idle %s' % (rk, [(m['pp_busy_s'], m['pp_idle_s'])
                                                           for m in rr]))
        nparams = None
        # one micro-batch: the state averages the accumulation (1/(A x M)),
        # which would scale the ones
        # (interleaved needs micro-batches a multiple of pp: pp = 2 of them,
        # the ones halved, exactly)
        inter = 'interleaved' in extra
        one = [(('%d' % pp if inter and extra[i - 1] == '--micro-batches' else '1')
                if i > 0 and extra[i - 1] in ('--micro-batches', '--grad-accum') else a)
               for i, a in enumerate(extra)]
        r = norm_ones(rank_bin, args + one, work, 'ones_' + name, world)
        if r is None:
            bad.append('norm-ones run failed')
        else:
            nparams = r[1]
            want = struct.unpack('f', struct.pack('f', math.sqrt(r[1])))[0] / (pp if inter else 1)
            if r[0] != want:
                bad.append('norm-ones %.9g, want sqrt(%d) = %.9g' % (r[0], r[1], want))
        held = ''
        if name == 'pp4' and nparams:
            total = sum(rr[-1]['memory']['params']['current'] for rr in runs) // 4
            unit0 = (256 + 16) * 32  # wte (Vp, C) + wpe (T, C): the last stage's copy
            held = 'stages hold %d = %d + copy %d' % (total, nparams, unit0)
            if total != nparams + unit0:
                bad.append('stages hold %d parameters, want %d + %d' % (total, nparams, unit0))
        print('%-9s %.1f s  worst loss rel %.1e  norm rel %.1e  step-1 grad rel %.1e (%s)  '
              'idle/step (stage 0..%d) %s  %s %s' % (
                  name, time.time() - t0, worst_l, worst_n, gerr, gname, pp - 1,
                  ' '.join('%.1f%%' % (100.0 * sum(m['pp_idle_s'] for m in runs[s * per_stage]) /
                                       max(1e-12, sum(m['pp_idle_s'] + m['pp_busy_s']
                                                      for m in runs[s * per_stage])))
                           for s in range(pp)), held,
                  'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    # 1F1B holds min(p - s, M) micro-batches' activations per stage, GPipe M:
    # stage 0 of pp 2 with 4 micro-batches holds 2 slots vs 4 (of equal size)
    if 'pp2gpipe' in acts and 'pp2_1f1b' in acts:
        g, o = acts['pp2gpipe'], acts['pp2_1f1b']
        ok = o[0] * 2 == g[0] and o[1] * 4 == g[1]
        print('activation peak per stage, pp 2, 4 micro-batches: gpipe %s, 1f1b %s bytes %s' % (
            g, o, 'ok' if ok else 'FAIL (want 1f1b = gpipe / 2 on stage 0, / 4 on stage 1)'))
        failures += not ok
    if 'mb4x8' in results and 'mb16x2' in results:
        w = max(max(rel(a['loss'], b['loss']), rel(a['grad_norm'], b['grad_norm']))
                for a, b in zip(results['mb4x8'], results['mb16x2']))
        print('batch 32 as 4 x 8 vs 16 x 2: worst rel %.1e %s' % (
            w, 'ok' if w <= TOL_LOSS else 'FAIL > %g' % TOL_LOSS))
        failures += not w <= TOL_LOSS
    if pctl:
        failures += plan_check(rank_bin, pctl, data, work)
    # interleaved: each stage holds V chunk models per micro-batch in flight
    # (stage 0 of pp 2, M 4, V 2: 4 + 2 chunk buffers, stage 1: 3 + 1);
    # `pctl plan` predicts exactly what each stage measured
    if pctl and 'pp2int2' in acts:
        plan = json.loads(subprocess.run(
            [pctl, 'plan', '--layers', '4', '--heads', '4', '--dim', '32', '--seq', '16',
             '--pp', '2', '--micro-batches', '4', '--batch', '8', '--schedule', 'interleaved',
             '--virtual-stages', '2', '--json'], check=True, capture_output=True,
            text=True).stdout)['pipeline']['interleaved']
        want = [int(st['activation_bytes']) for st in plan]
        held = [st['micro_batches_held'] for st in plan]
        ok = acts['pp2int2'] == want and held == [6, 4]
        print('activation peak per stage, interleaved pp 2 V 2 M 4: measured %s, pctl plan %s '
              '(chunk buffers %s) %s' % (acts['pp2int2'], want, held, 'ok' if ok else 'FAIL'))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
