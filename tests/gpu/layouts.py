#!/usr/bin/python3
"""layouts.py: every parallel layout on one device against one rank on it,
the layouts section of deploy/gpu-check.sh (and, with --device sim or cpu,
a test of this driver where no GPU is).

Each layout runs as 2 (or 4) ranks of parallax-rank through the standalone
bootstrap (tests/engine/zero_util.py's launcher), all on --device DEVICE,
5 steps of a 4-layer GPT (4 heads, dim 64, seq 64, batch 8) on random
tokens, and is checked three ways:
  * fp32 against one fp32 rank on the same device: loss within 1e-5 and
    grad norm within 1e-4 relative at every step (the repo's equivalence
    tests' tolerances), every rank reporting the same figures;
  * bf16 against the same layout in fp32: loss within 1e-2;
  * bf16 against the same layout in bf16 on the CPU: loss within 1e-3 (the
    same rounding, another accumulation order); not run with --device cpu.
Layouts: dp=2 with ZeRO 0, 1, 2 and 3; tp=2 with and without
--sequence-parallel; pp=2 with gpipe, 1f1b, zb1 (4 micro-batches) and
interleaved with 2 virtual stages; cp=2 (ring attention); 8 experts top-2
(dropless) with ep=2 and with ep=1 (dp=2), against one rank with the same
experts; tp=2 x cp=2 (4 ranks). Then checkpoints across devices: a
checkpoint written at step 3 by one rank on DEVICE resumed on the CPU, and
one written on the CPU resumed on DEVICE: steps 4-6 equal the saving run's
(loss 1e-5, grad norm 1e-4).

Prints one table (layout, ranks, the relative differences, PASS/FAIL) and
exits 1 when a row fails.

usage: layouts.py --rank BIN --work DIR [--device cuda|cuda:K|sim|cpu]
                  [--jobs N] [--only NAME[,NAME...]] [--list]
(--device sim sets PX_SIM_DEVICE=1: the simulated device of the CPU build.)
Stdlib only; zero_util.py and pxport.py beside this file or in tests/."""
import argparse
import concurrent.futures
import os
import struct
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
for d in (here, os.path.join(here, '..', 'engine'), os.path.join(here, '..')):
    sys.path.insert(0, d)
from zero_util import rel, run_world  # noqa: E402

STEPS = 5
MODEL = ['--layers', '4', '--heads', '4', '--dim', '64', '--seq', '64', '--batch', '8',
         '--lr', '1e-3', '--seed', '1337', '--vocab', '256']
MOE = ['--experts', '8', '--top-k', '2', '--dropless', '--aux-loss-coef', '0.01']
PP = ['--pp', '2', '--micro-batches', '4', '--schedule']
# name: (ranks, reference model: 'dense' or 'moe', the layout's flags)
LAYOUTS = {
    'dp2': (2, 'dense', []),
    'dp2-zero1': (2, 'dense', ['--zero', '1']),
    'dp2-zero2': (2, 'dense', ['--zero', '2']),
    'dp2-zero3': (2, 'dense', ['--zero', '3']),
    'tp2': (2, 'dense', ['--tp', '2']),
    'tp2-sp': (2, 'dense', ['--tp', '2', '--sequence-parallel']),
    'pp2-gpipe': (2, 'dense', PP + ['gpipe']),
    'pp2-1f1b': (2, 'dense', PP + ['1f1b']),
    'pp2-zb1': (2, 'dense', PP + ['zb1']),
    'pp2-interleaved-v2': (2, 'dense', PP + ['interleaved', '--virtual-stages', '2']),
    'cp2': (2, 'dense', ['--cp', '2']),
    'moe8-top2-ep2': (2, 'moe', ['--ep', '2']),
    'moe8-top2-ep1-dp2': (2, 'moe', ['--ep', '1']),
    'tp2-cp2': (4, 'dense', ['--tp', '2', '--cp', '2']),
}
BASE = {'dense': [], 'moe': MOE}
TOL_F32_LOSS, TOL_F32_NORM, TOL_BF16_F32, TOL_BF16_CPU = 1e-5, 1e-4, 1e-2, 1e-3
CKPT_STEP, CKPT_STEPS = 3, 6


def make_tokens(path, n=400000, vocab=256, seed=1337):
    """Random tokens in the llm.c file layout (what tests/gpu/make_tokens.py writes)."""
    rnd = random.Random(seed)
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack('<%dH' % n, *(rnd.randrange(vocab) for _ in range(n))))


def worst(runs, base, key):
    """The largest relative difference of `key` between rank 0's steps of
    runs (one list of metric dicts per rank) and base's (one rank's list),
    matched by step number; None when a step is missing."""
    b = {m['step']: m[key] for m in base}
    pairs = [(m[key], b.get(m['step'])) for m in runs[0]]
    if not pairs or any(y is None for _, y in pairs):
        return None
    return max(rel(x, y) for x, y in pairs)


def ranks_agree(runs):
    first = [(m['loss'], m['grad_norm']) for m in runs[0]]
    return all([(m['loss'], m['grad_norm']) for m in r] == first for r in runs)


class Runner:
    def __init__(self, rank_bin, work, data):
        self.rank_bin, self.work, self.data = rank_bin, work, data

    def __call__(self, tag, world, device, precision, extra, steps=STEPS):
        args = MODEL + ['--steps', str(steps), '--data', self.data, '--device', device,
                        '--precision', precision] + extra
        runs = run_world(self.rank_bin, args, self.work, tag, world, deadline_s=150)
        if runs is not None and len(runs[0]) == 0:
            print('%s: no steps reported' % tag)
            return None
        return runs


def fmt(x):
    return '-' if x is None else '%.2e' % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rank', required=False, help='parallax-rank binary')
    ap.add_argument('--work', required=False)
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--jobs', type=int, default=4, help='layouts run at once')
    ap.add_argument('--only', default='', help='comma-separated layout names (and ckpt)')
    ap.add_argument('--list', action='store_true', help='print the layout names and exit')
    a = ap.parse_args()
    names = list(LAYOUTS) + ['ckpt']
    if a.list:
        print('\n'.join(names))
        return 0
    if not a.rank or not a.work:
        ap.error('--rank and --work are required')
    only = [n for n in a.only.split(',') if n]
    bad = [n for n in only if n not in names]
    if bad:
        ap.error('unknown layout %s (one of: %s)' % (', '.join(bad), ', '.join(names)))
    if a.device == 'sim':
        os.environ['PX_SIM_DEVICE'] = '1'
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, 'tokens.bin')
    make_tokens(data)
    run = Runner(a.rank, a.work, data)
    dev, on_cpu = a.device, a.device == 'cpu'
    todo = [n for n in LAYOUTS if not only or n in only]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        # one rank on the device: the references, one per model
        refs = {m: pool.submit(run, 'ref-%s' % m, 1, dev, 'fp32', BASE[m])
                for m in sorted({LAYOUTS[n][1] for n in todo})}
        jobs = {}
        for n in todo:
            world, m, extra = LAYOUTS[n]
            jobs[n] = [pool.submit(run, '%s-%s' % (n, p), world, d, p, BASE[m] + extra)
                       for d, p in ((dev, 'fp32'), (dev, 'bf16'))]
            if not on_cpu:
                jobs[n].append(pool.submit(run, '%s-cpu-bf16' % n, world, 'cpu', 'bf16',
                                           BASE[m] + extra))
        ckpt = None
        if not only or 'ckpt' in only:
            ckpt = [pool.submit(checkpoint_pair, run, a.work, src, dst)
                    for src, dst in ((dev, 'cpu'), ('cpu', dev))]
        head = ('layout', 'ranks', 'fp32 loss', 'fp32 norm', 'bf16/fp32', 'bf16/cpu bf16',
                'result')
        print('layouts on %s (%d steps; fp32 loss <= %g, norm <= %g; bf16 vs fp32 <= %g; '
              'bf16 vs cpu bf16 <= %g; relative, worst step)' %
              (dev, STEPS, TOL_F32_LOSS, TOL_F32_NORM, TOL_BF16_F32, TOL_BF16_CPU))
        print('%-20s %5s %10s %10s %10s %13s %s' % head, flush=True)
        refs = {m: f.result() for m, f in refs.items()}
        rows = []

        def show(r):  # each row as soon as it is known: a cut-short run keeps them
            rows.append(r)
            print('%-20s %5d %10s %10s %10s %13s %s' % (
                r[0], r[1], fmt(r[2]), fmt(r[3]), fmt(r[4]), fmt(r[5]),
                'PASS' if r[6] else 'FAIL (%s)' % r[7]), flush=True)
        for n in todo:
            world, m, _ = LAYOUTS[n]
            show(layout_row(n, world, refs[m], [f.result() for f in jobs[n]], on_cpu))
        for f in ckpt or []:
            show(f.result())
    failed = [r[0] for r in rows if not r[6]]
    print('layouts: %d rows, %d failed%s' % (len(rows), len(failed),
                                             (': ' + ' '.join(failed)) if failed else ''))
    return 1 if failed else 0


def layout_row(name, world, ref, results, on_cpu):
    """(name, ranks, fp32 loss rel, fp32 norm rel, bf16 vs fp32, bf16 vs cpu
    bf16, ok, why) for one layout's runs [fp32, bf16(, cpu bf16)]."""
    f32, b16 = results[0], results[1]
    cpu16 = results[2] if len(results) > 2 else None
    why = []
    if ref is None:
        return (name, world, None, None, None, None, False, 'the one-rank reference failed')
    if f32 is None or b16 is None or (not on_cpu and cpu16 is None):
        which = [w for w, r in (('fp32', f32), ('bf16', b16), ('cpu bf16', cpu16))
                 if r is None and (w != 'cpu bf16' or not on_cpu)]
        return (name, world, None, None, None, None, False, 'run failed: ' + ', '.join(which))
    loss = worst(f32, ref[0], 'loss')
    norm = worst(f32, ref[0], 'grad_norm')
    vs32 = worst(b16, f32[0], 'loss')
    vscpu = None if on_cpu else worst(b16, cpu16[0], 'loss')
    for r, what in ((f32, 'fp32'), (b16, 'bf16')):
        if not ranks_agree(r):
            why.append('%s ranks disagree' % what)
        if len(r[0]) != STEPS:
            why.append('%s: %d steps' % (what, len(r[0])))
    if loss is None or loss > TOL_F32_LOSS:
        why.append('fp32 loss')
    if norm is None or norm > TOL_F32_NORM:
        why.append('fp32 norm')
    if vs32 is None or vs32 > TOL_BF16_F32:
        why.append('bf16 vs fp32')
    if not on_cpu and (vscpu is None or vscpu > TOL_BF16_CPU):
        why.append('bf16 vs cpu bf16')
    return (name, world, loss, norm, vs32, vscpu, not why, ', '.join(why))


def checkpoint_pair(run, work, src, dst):
    """A checkpoint written by one rank on src at step 3 of 6, resumed on dst:
    the resumed steps 4-6 against the saving run's."""
    name = 'ckpt %s->%s' % (src.split(':')[0], dst.split(':')[0])
    tag = 'ckpt-%s-%s' % (src.replace(':', ''), dst.replace(':', ''))
    ck = os.path.join(work, tag)
    saved = run(tag + '-save', 1, src, 'fp32', ['--checkpoint-every', str(CKPT_STEP),
                                                '--checkpoint-dir', ck], steps=CKPT_STEPS)
    if saved is None:
        return (name, 1, None, None, None, None, False, 'the saving run failed')
    resumed = run(tag + '-resume', 1, dst, 'fp32',
                  ['--resume', os.path.join(ck, 'step_%d' % CKPT_STEP)], steps=CKPT_STEPS)
    if resumed is None:
        return (name, 1, None, None, None, None, False, 'the resumed run failed')
    steps = [m['step'] for m in resumed[0]]
    loss, norm = worst(resumed, saved[0], 'loss'), worst(resumed, saved[0], 'grad_norm')
    why = []
    if steps != list(range(CKPT_STEP + 1, CKPT_STEPS + 1)):
        why.append('resumed steps %s' % steps)
    if loss is None or loss > TOL_F32_LOSS:
        why.append('loss')
    if norm is None or norm > TOL_F32_NORM:
        why.append('norm')
    return (name, 1, loss, norm, None, None, not why, ', '.join(why))


if __name__ == '__main__':
    sys.exit(main())
