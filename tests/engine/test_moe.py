#!/usr/bin/env python3
"""test_moe.py: the mixture of experts with expert parallelism equals the
single-rank run (integration; issue 11).

Model: 2 layers (both MoE), 4 heads, dim 32, seq 16, global batch 8, 10
steps, 8 experts, top-2, clip 1.0. Each layout runs through the standalone
bootstrap and is checked against one rank with the same MoE flags:
  * every rank reports the same loss and grad norm at every step, within
    1e-5 relative of the single rank (zero_util.equivalence_problems);
  * every gradient tensor of every step (the dense units of layout.json and
    the router and experts of moe_layout.json, gathered over the ep group),
    within 1e-4 relative (||ours - single|| / ||single||);
  * the tokens each expert received and dropped (the metrics' moe_received /
    moe_dropped) equal the single rank's: the same routing, the same
    dropping.
Layouts: ep2 (dp 2 = ep 2) and ep4 (dp 4 = ep 4) at capacity factor 1.0:
the ep group holds the whole global batch, so capacity and the fill order
are the single rank's; ep2a2 the same with 2 micro-batches per step (each
routed on its own, as one rank's); dp2ep2 (world 4, experts replicated twice, their
gradients summed over the edp pairs) and the same with ZeRO 1 and 3, dropless:
two ep groups fill their capacities from half the batch each, which one
rank cannot reproduce, so dropless is their oracle. Skewed routing
(--test-router-skew 30: every token's choices are experts 0 and 1, both on
ep rank 0): at capacity 1.0 most choices are dropped and ep ranks 1-3
receive zero tokens, at ep 4 against one rank, and dropless likewise; no
run may hang (a 180 s deadline per world). Rejections: 6 experts on ep 4,
top-k above the experts, ep not dividing dp, each named.
usage: test_moe.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]"""
import array
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, run_world  # noqa: E402

STEPS = 10
ARGS = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
        '--steps', str(STEPS), '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
        '--experts', '8', '--top-k', '2', '--capacity-factor', '1.0', '--aux-loss-coef', '0.01']
TOL_LOSS = TOL_NORM = 1e-5
TOL_GRAD = 1e-4
BASES = {'cap': [], 'dropless': ['--dropless'], 'skew': ['--test-router-skew', '30'],
         'skewdl': ['--test-router-skew', '30', '--dropless'],
         'cap_a2': ['--grad-accum', '2']}
LAYOUTS = {  # name: (world, base, extra args)
    'ep2': (2, 'cap', ['--ep', '2']),
    'ep4': (4, 'cap', ['--ep', '4']),
    'ep2a2': (2, 'cap_a2', ['--ep', '2']),
    'dp2ep2': (4, 'dropless', ['--ep', '2']),
    'dp2ep2z1': (4, 'dropless', ['--ep', '2', '--zero', '1']),
    'dp2ep2z3': (4, 'dropless', ['--ep', '2', '--zero', '3']),
    'ep4skew': (4, 'skew', ['--ep', '4']),
    'ep4skewdl': (4, 'skewdl', ['--ep', '4']),
}


def read_f32(path):
    a = array.array('f')
    with open(path, 'rb') as f:
        a.frombytes(f.read())
    return a


def tensor_err(ga, gb, o, n):
    d = sum((x - y) ** 2 for x, y in zip(ga[o:o + n], gb[o:o + n]))
    s = sum(y * y for y in gb[o:o + n])
    return math.sqrt(d) / math.sqrt(s) if s > 0 else math.sqrt(d)


def grad_errors(dump_a, dump_b):
    """worst tensor of ||a - b|| / ||b|| over every dumped step's dense and
    MoE gradients, and its name"""
    layout = json.load(open(os.path.join(dump_b, 'layout.json')))
    mlay = json.load(open(os.path.join(dump_b, 'moe_layout.json')))
    worst, name = 0.0, ''
    for s in range(1, STEPS + 1):
        for fname, tensors in (('grads_%d.bin', [(t['name'], t['offset'], t['size'])
                                                 for t in layout['tensors']]),
                               ('moe_grads_%d.bin',
                                [('%s[%d]' % (t['name'], t['layer']), t['offset'],
                                  math.prod(t['shape'])) for t in mlay['tensors']])):
            ga = read_f32(os.path.join(dump_a, fname % s))
            gb = read_f32(os.path.join(dump_b, fname % s))
            if len(ga) != len(gb):
                return float('inf'), '%s: size %d vs %d' % (fname % s, len(ga), len(gb))
            for tname, o, n in tensors:
                e = tensor_err(ga, gb, o, n)
                if e > worst or not name:
                    worst, name = e, 'step %d %s' % (s, tname)
    return worst, name


def ep_group_heads(world, extra):
    """the ranks at tp 0, pp stage 0 and ep index 0: one per ep group
    (the layout's order, planner/layout.c: tp innermost, then cp, dp, pp;
    ep inside the dp x cp grid; every stage reports the model's counts,
    summed over the stages)"""
    deg = {k: int(extra[extra.index('--' + k) + 1]) if '--' + k in extra else 1
           for k in ('tp', 'cp', 'pp', 'ep')}
    dp = world // (deg['tp'] * deg['cp'] * deg['pp'])
    heads = []
    for r in range(world):
        tp, rest = r % deg['tp'], r // deg['tp']
        cp, rest = rest % deg['cp'], rest // deg['cp']
        d, pp = rest % dp, rest // dp
        if tp == 0 and pp == 0 and (cp + deg['cp'] * d) % deg['ep'] == 0:
            heads.append(r)
    return heads


def rejections(rank_bin, data):
    """each bad MoE config exits 2 naming its values"""
    base = ARGS + ['--data', data]
    cases = [(['--dp', '4', '--ep', '4', '--experts', '6'],
              'experts=6 is not divisible by ep=4'),
             (['--experts', '1', '--top-k', '2'], 'top_k=2 is larger than experts=1'),
             (['--dp', '2', '--ep', '4'], 'ep=4 does not divide dp x cp = 2'),
             (['--top-k', '3'], 'top_k=3 must be 1 or 2'),
             (['--experts', '0', '--ep', '2', '--dp', '2'], 'ep=2 needs experts')]
    bad = 0
    for extra, needle in cases:
        p = subprocess.run([rank_bin] + base + extra, capture_output=True, text=True,
                           timeout=60)
        ok = p.returncode == 2 and needle in p.stdout + p.stderr
        print('reject %-40s exit %d %s' % (needle, p.returncode, 'ok' if ok else 'FAIL'))
        if not ok:
            print(p.stdout[-500:], p.stderr[-500:])
        bad += not ok
    return bad


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    names = sys.argv[4:] or list(LAYOUTS)
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data, '--dump-steps', str(STEPS)]
    failures = rejections(rank_bin, data)
    bases = {}
    for b in sorted(set(LAYOUTS[n][1] for n in names)):
        dump = os.path.join(work, 'dump_base_' + b)
        runs = run_world(rank_bin, args + BASES[b] + ['--dump-dir', dump], work, 'base_' + b, 1)
        if runs is None:
            print('FAIL: single-rank run %s failed' % b)
            return 1
        bases[b] = (runs[0], dump)
        r = runs[0]
        drops = sum(sum(m['moe_dropped']) for m in r)
        print('base %-9s loss %.4f -> %.4f, %d choices dropped in %d steps' % (
            b, r[0]['loss'], r[-1]['loss'], drops, STEPS))
        if r[-1]['loss'] > r[0]['loss'] - 0.1:
            print('FAIL: base %s makes no progress' % b)
            failures += 1
        if (drops == 0) != ('--dropless' in BASES[b]):
            print('FAIL: base %s: %d choices dropped' % (b, drops))
            failures += 1
    for name in names:
        world, b, extra = LAYOUTS[name]
        base, base_dump = bases[b]
        t0 = time.time()
        dump = os.path.join(work, 'dump_' + name)
        runs = run_world(rank_bin, args + BASES[b] + extra + ['--dump-dir', dump], work, name,
                         world)
        if runs is None:
            print('FAIL %s: a rank failed or hung' % name)
            failures += 1
            continue
        bad, worst_l, worst_n = equivalence_problems(runs, base, STEPS, TOL_LOSS, TOL_NORM)
        gerr, gname = grad_errors(dump, base_dump)
        if not gerr <= TOL_GRAD:
            bad.append('gradient %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        # the routing: the ep groups' token counts (one rank of each ep
        # group; tensor ranks and stages repeat them) add up to the single
        # rank's, and every rank of a group reports the same
        heads = ep_group_heads(world, extra)
        same = all(runs[r][s]['moe_received'] == runs[heads[0]][s]['moe_received']
                   for r in range(world) for s in range(STEPS)) if len(heads) == 1 else True
        if not same:
            bad.append('ranks of one ep group report different token counts')
        heads = ep_group_heads(world, extra)
        for s in range(STEPS):
            rec = [sum(runs[r][s]['moe_received'][e] for r in heads) for e in range(8)]
            drop = [sum(runs[r][s]['moe_dropped'][e] for r in heads) for e in range(8)]
            if rec != base[s]['moe_received'] or drop != base[s]['moe_dropped']:
                bad.append('step %d routing: received %s dropped %s, one rank %s %s' % (
                    s + 1, rec, drop, base[s]['moe_received'], base[s]['moe_dropped']))
                break
        if 'skew' in name:  # experts 2..7 (ep ranks 1-3) received nothing
            idle = all(sum(m['moe_received'][2:]) == 0 for m in runs[0])
            if not idle:
                bad.append('skewed routing still sent tokens to experts 2-7')
        print('%-10s %.1f s  worst loss rel %.1e  norm rel %.1e  grad rel %.1e (%s)  %s' % (
            name, time.time() - t0, worst_l, worst_n, gerr, gname,
            'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
