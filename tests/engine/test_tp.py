#!/usr/bin/env python3
"""test_tp.py: tensor parallelism (Megatron-LM) equals the single-rank run
(integration; issue 9).

Model: 2 layers, 4 heads, dim 32, seq 16, global batch 8, 10 steps, clip
1.0, same seed and data for every layout. One single-rank run is the
reference; then the layouts below through the standalone bootstrap
(PX_RANK / PX_WORLD_SIZE / PX_MASTER_ADDR / PX_MASTER_PORT). Checks, per
layout:
  * every rank reports the same loss and grad norm at every step;
  * loss and grad norm within 1e-5 relative of the single rank, each step;
  * step 1's gradient, gathered to the canonical layout (--dump-dir), within
    1e-4 relative of the single rank's, tensor by tensor
    (||ours - single|| / ||single||): many tensor-parallel bugs leave the
    loss right and only the gradients wrong;
  * the replicated parameters (LayerNorms, wpe, row-parallel biases) are
    bitwise equal on the tensor ranks of one dp index after every step (the
    ranks' replicated_digest);
  * the backward overlap: tp_hidden_s > 0 (collectives in flight while the
    weight gradients computed) and tp_wait_s <= tp_comm_s;
  * the norm check: with every parameter and gradient 1.0
    (--test-norm-ones) the global norm is exactly sqrt(number of
    parameters), so no parameter is counted twice or missed.
  * sequence parallelism (Korthikanti et al. 2022) on and off (tp2sp and
    tp2, when both run) give the same loss and grad norm within 1e-6.
usage: test_tp.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]
LAYOUT: tp2, tp4, dp2tp2, dp2tp2z1, dp2tp2z3, tp2sp, tp4sp, dp2tp2spz3a2 (all by
default; the last is ZeRO-3 with sequence parallelism and 2 micro-batches)."""
import array
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, rel, run_world  # noqa: E402

ARGS = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
        '--steps', '10', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
        '--replica-digests']
TOL_LOSS = TOL_NORM = 1e-5
TOL_GRAD = 1e-4
LAYOUTS = {  # name: (world, dp, tp, extra args)
    'tp2': (2, 1, 2, ['--tp', '2']),
    'tp4': (4, 1, 4, ['--tp', '4']),
    'dp2tp2': (4, 2, 2, ['--dp', '2', '--tp', '2']),
    'dp2tp2z1': (4, 2, 2, ['--dp', '2', '--tp', '2', '--zero', '1']),
    'dp2tp2z3': (4, 2, 2, ['--dp', '2', '--tp', '2', '--zero', '3']),
    'tp2sp': (2, 1, 2, ['--tp', '2', '--sequence-parallel']),
    'tp4sp': (4, 1, 4, ['--tp', '4', '--sequence-parallel']),
    'dp2tp2spz3a2': (4, 2, 2, ['--dp', '2', '--tp', '2', '--zero', '3', '--sequence-parallel',
                               '--grad-accum', '2']),
}
TOL_SP = 1e-6  # sequence parallelism on vs off (tp2sp vs tp2)


def read_f32(path):
    a = array.array('f')
    with open(path, 'rb') as f:
        a.frombytes(f.read())
    return a


def grad_errors(dump_a, dump_b):
    """worst tensor of ||a - b|| / ||b|| of step 1's gradients, and its name"""
    layout = json.load(open(os.path.join(dump_b, 'layout.json')))
    ga, gb = read_f32(os.path.join(dump_a, 'grads_1.bin')), read_f32(os.path.join(dump_b,
                                                                                  'grads_1.bin'))
    if len(ga) != len(gb) or len(gb) != layout['num_params']:
        return float('inf'), 'size %d vs %d' % (len(ga), len(gb))
    worst, name = 0.0, ''
    for t in layout['tensors']:
        o, n = t['offset'], t['size']
        d = s = 0.0
        for i in range(o, o + n):
            d += (ga[i] - gb[i]) ** 2
            s += gb[i] ** 2
        e = math.sqrt(d) / math.sqrt(s) if s > 0 else math.sqrt(d)
        if e > worst or not name:
            worst, name = e, t['name']
    return worst, name


def norm_ones(rank_bin, args, work, tag, world):
    runs = run_world(rank_bin, args + ['--test-norm-ones'], work, tag, world)
    if runs is None:
        return None
    m = re.search(r'norm-ones (\S+) params (\d+)', log_text(work, tag, 0))
    if not m:
        return None
    # printed %.9g: round-trips a float32 exactly
    return struct.unpack('f', struct.pack('f', float(m.group(1))))[0], int(m.group(2))


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    names = sys.argv[4:] or list(LAYOUTS)
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data, '--dump-steps', '1']
    failures = 0
    results = {}
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
    want = None
    if r is None:
        print('FAIL: single-rank norm-ones run failed')
        failures += 1
    else:
        want = struct.unpack('f', struct.pack('f', math.sqrt(r[1])))[0]
        ok = r[0] == want
        print('norm-ones tp1: %.9g, sqrt(%d) = %.9g %s' % (r[0], r[1], want,
                                                          'ok' if ok else 'FAIL'))
        failures += not ok
    for name in names:
        world, dp, tp, extra = LAYOUTS[name]
        t0 = time.time()
        dump = os.path.join(work, 'dump_' + name)
        runs = run_world(rank_bin, args + extra + ['--dump-dir', dump], work, name, world)
        if runs is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        results[name] = runs[0]
        bad, worst_l, worst_n = equivalence_problems(runs, base, 10, TOL_LOSS, TOL_NORM)
        # rank order: tp innermost (layout.h), so ranks d*tp .. d*tp+tp-1 are
        # the tensor group of dp index d
        for d in range(dp):
            group = runs[d * tp:(d + 1) * tp]
            for step in range(len(group[0])):
                digests = set(rr[step]['replicated_digest'] for rr in group)
                if '0' * 16 in digests:  # --replica-digests must have computed them
                    bad.append('dp %d step %d: no replicated digest' % (d, step + 1))
                    break
                if len(digests) != 1:
                    bad.append('dp %d step %d: replicated parameters differ across tp ranks %s'
                               % (d, step + 1, sorted(digests)))
                    break
        # the overlap (tp.h): column-parallel input gradients' collectives
        # were in flight while the weight gradients computed, and the
        # time waiting for them is part of the blocked time
        for rk, rr in enumerate(runs):
            m = rr[-1]
            if not (m['tp_hidden_s'] > 0 and 0 <= m['tp_wait_s'] <= m['tp_comm_s']):
                bad.append('rank %d: tp times hidden %s wait %s blocked %s' % (
                    rk, m['tp_hidden_s'], m['tp_wait_s'], m['tp_comm_s']))
        gerr, gname = grad_errors(dump, base_dump)
        if not gerr <= TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        r = norm_ones(rank_bin, args + extra, work, 'ones_' + name, world)
        if r is None or want is None or r[0] != want:
            bad.append('norm-ones %s, want sqrt(params) = %s' % (r, want))
        print('%-9s %.1f s  worst loss rel %.1e  norm rel %.1e  step-1 grad rel %.1e (%s)  '
              'norm-ones %s %s' % (name, time.time() - t0, worst_l, worst_n, gerr, gname,
                                   r and '%.9g' % r[0], 'ok' if not bad else
                                   'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    if 'tp2' in results and 'tp2sp' in results:
        w = max(max(rel(a['loss'], b['loss']), rel(a['grad_norm'], b['grad_norm']))
                for a, b in zip(results['tp2sp'], results['tp2']))
        print('sequence parallelism on vs off (tp 2): worst rel %.1e %s' % (
            w, 'ok' if w <= TOL_SP else 'FAIL > %g' % TOL_SP))
        failures += not w <= TOL_SP
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
