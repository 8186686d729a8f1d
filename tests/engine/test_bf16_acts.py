#!/usr/bin/python3
"""test_bf16_acts.py: bf16 activation storage (issue 12) is bit for bit the
bf16 run with fp32 storage (integration; standalone bootstrap, CPU ranks).

Under --precision bf16 the LayerNorm outputs and the GELU output, which only
bf16 GEMMs read, are stored as bf16 (engine/gpt.c); PX_BF16_ACTS=0 keeps
them fp32 (the storage before). The GEMMs round those operands with the same
function either way, so for each layout below the two runs must agree
EXACTLY: every rank's loss and grad norm at every step, and every byte of
the step-1 gradient dump (--dump-dir). Layouts: one rank, tp2 (the
column-parallel weight gradients read the bf16 LayerNorm outputs), tp2sp
(sequence parallelism: the gathered LayerNorm outputs stay fp32, the GELU
output is bf16), pp2zb1 (the split weight pass), ep2 (the mixture of
experts reads ln2 unrounded in forward, widened from bf16 in backward).
Also: rank 0's activation bytes (metrics: memory) are smaller with bf16
storage and equal to the plan's (plan.h) in both runs (one, tp2, tp2sp).
usage: test_bf16_acts.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]"""
import filecmp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, run_world  # noqa: E402

ARGS = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
        '--steps', '4', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0',
        '--precision', 'bf16']
MOE = ['--experts', '4', '--top-k', '2', '--dropless']
LAYOUTS = {  # name: (world, extra args)
    'one': (1, []),
    'tp2': (2, ['--tp', '2']),
    'tp2sp': (2, ['--tp', '2', '--sequence-parallel']),
    'pp2zb1': (2, ['--pp', '2', '--micro-batches', '2', '--schedule', 'zb1']),
    'ep2': (2, ['--ep', '2'] + MOE),
}

# where the metrics' activation plan is the model's table alone (the split
# backward's stash and the experts' buffers are outside it)
PLANNED = ('one', 'tp2', 'tp2sp')


def same_dirs(a, b):
    """names of files that differ (or exist on one side only)"""
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if fa != fb:
        return ['file lists %s vs %s' % (fa, fb)]
    if not fa:
        return ['no dump files']
    return [f for f in fa if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f),
                                             shallow=False)]


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    names = sys.argv[4:] or list(LAYOUTS)
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = 0
    for name in names:
        world, extra = LAYOUTS[name]
        runs = {}
        for store in ('0', '1'):
            os.environ['PX_BF16_ACTS'] = store
            dump = os.path.join(work, 'dump_%s_%s' % (name, store))
            r = run_world(rank_bin, ARGS + extra + ['--data', data, '--dump-steps', '1',
                                                   '--dump-dir', dump],
                          work, '%s_%s' % (name, store), world)
            runs[store] = (r, dump)
        (old, dold), (new, dnew) = runs['0'], runs['1']
        if old is None or new is None:
            print('FAIL %s: a rank failed' % name)
            failures += 1
            continue
        bad = []
        for rk, (ro, rn) in enumerate(zip(old, new)):
            lo = [(m['loss'], m['grad_norm']) for m in ro]
            ln = [(m['loss'], m['grad_norm']) for m in rn]
            if len(lo) != 4 or lo != ln:
                bad.append('rank %d: (loss, grad norm) %s vs %s' % (rk, lo, ln))
        diff = same_dirs(dold, dnew)
        if diff:
            bad.append('step-1 gradient dumps differ: %s' % diff)
        mo = [m['memory']['activations']['current'] for m in old[0]][-1:]
        mn = [m['memory']['activations']['current'] for m in new[0]][-1:]
        for m in (new[0] + old[0]) if name in PLANNED else []:
            a = m['memory']['activations']
            if a['plan'] != a['current']:
                bad.append('step %d: activations %d bytes, the plan says %d'
                           % (m['step'], a['current'], a['plan']))
                break
        print('%-7s %d ranks: losses %s; activation bytes fp32 storage %s, bf16 storage %s %s'
              % (name, world, ' '.join('%.7f' % m['loss'] for m in new[0]), mo[0], mn[0],
                 'ok' if not bad else 'FAIL'))
        if not mn[0] < mo[0]:
            bad.append('bf16 storage did not shrink the activations (%s vs %s)' % (mn, mo))
        for b in bad:
            print('  ' + b)
        failures += bool(bad)
    print('FAIL' if failures else 'ok')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
