#!/usr/bin/env python3
"""test_moe_resume.py: checkpoints of the mixture of experts, resumed on
other layouts (integration; issue 11).

Model: test_moe.py's (2 MoE layers, 8 experts top-2, capacity 1.0, 10
steps). moe_checkpoint.h writes the routers, experts and their AdamW
moments in canonical order beside the dense shards, so any layout loads
them:
 1. ep2 (dp 2 = ep 2) runs 10 steps uninterrupted, checkpointing at step 5
    (step_5/moe.json, moe.bin of 3 x the canonical MoE size, meta.json).
    Its step_5 resumes steps 6-10 on ep 2 (the same), one rank (every
    expert on one rank), ep 4, cp 2 x ep 2 (ZeRO 1) and tp 2 (the units
    re-cut over the tensor group): each ep group holds
    the whole batch, so routing and capacity are the uninterrupted run's,
    and losses and grad norms of steps 6-10 must equal it within 1e-5
    relative, the step-10 parameters (dense and MoE dumps) within 1e-5.
 (Pipeline stages cannot checkpoint yet: the validator refuses pp with
 checkpoints for every model, dense too.)
 2. A checkpoint in the older unit layout, whose MoE layers' units still
    held the dense MLP they do not use (fcw fcb fcprojw fcprojb; step_5
    rewritten so, those tensors filled with values nothing may read):
    resumed on ep 2, its steps 6-10 and step-10 parameters bitwise those
    of the resume of step_5 itself.
 3. The uninterrupted run's --export-safetensors: one file, the dense
    tensors and moe_<tensor>.<layer> of each MoE layer (router (E,C), fcw
    (E,4C,C) ...), data contiguous and bitwise the step-10 parameters;
    fcw, fcb, fcprojw, fcprojb keep their canonical shapes, all 0 (both
    layers are MoE layers, which hold no dense MLP).
 4. Errors, each exiting non-zero naming the values: the checkpoint
    resumed by a model with 4 experts (experts=8 vs 4), and by a dense
    model (experts 0: the checkpoint holds a mixture of experts).
usage: test_moe_resume.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_moe  # noqa: E402
from zero_util import license_tokens, rel, run_world  # noqa: E402

TOL = 1e-5


def compare(name, runs, ref, first):
    """steps first..10 of every rank against ref's, 1e-5 relative"""
    bad = []
    worst = 0.0
    for rk, rr in enumerate(runs):
        if [m['step'] for m in rr] != list(range(first, test_moe.STEPS + 1)):
            bad.append('rank %d reported steps %s' % (rk, [m['step'] for m in rr]))
            continue
        for m in rr:
            b = ref[m['step'] - 1]
            e = max(rel(m['loss'], b['loss']), rel(m['grad_norm'], b['grad_norm']))
            worst = max(worst, e)
            if e > TOL:
                bad.append('rank %d step %d loss %.9g norm %.9g vs %.9g %.9g' % (
                    rk, m['step'], m['loss'], m['grad_norm'], b['loss'], b['grad_norm']))
                break
    return bad, worst


def param_err(dump_a, dump_b):
    """worst ||a - b|| / ||b|| of the step-10 dense and MoE parameters"""
    worst = 0.0
    for f in ('params_%d.bin' % test_moe.STEPS, 'moe_params_%d.bin' % test_moe.STEPS):
        a = test_moe.read_f32(os.path.join(dump_a, f))
        b = test_moe.read_f32(os.path.join(dump_b, f))
        if len(a) != len(b):
            return float('inf')
        worst = max(worst, test_moe.tensor_err(a, b, 0, len(b)))
    return worst


def old_layout(src, dst):
    """copies checkpoint src to dst in the older unit layout: each MoE
    layer's unit (4C^2 + 8C elements; a dense block has 12C^2 + 13C) gets
    its dense MLP's 8C^2 + 5C elements appended in each of its three arrays
    (params, m, v), filled with 7.0; the units re-padded to dp, meta.json's
    unit_sizes those of the old layout. One shard file at tp 1 (ZeRO 0)."""
    shutil.copytree(src, dst)
    meta = json.load(open(os.path.join(src, 'meta.json')))
    assert meta['tp'] == 1 and meta['nshards'] == 1, meta
    C, dp = meta['dim'], meta['dp']
    mlp = 8 * C * C + 5 * C
    raw = open(os.path.join(src, 'shard_tp0_0.bin'), 'rb').read()
    out, sizes, off = [], [], 0
    for u, n in enumerate(meta['unit_sizes']):
        pad = -(-n // dp) * dp
        moe = 0 < u <= meta['layers'] and n == 4 * C * C + 8 * C
        n2 = n + mlp if moe else n
        pad2 = -(-n2 // dp) * dp
        for _ in range(3):
            arr = raw[4 * off:4 * (off + n)]
            out.append(arr + struct.pack('<f', 7.0) * (n2 - n) + b'\0' * 4 * (pad2 - n2))
            off += pad
        sizes.append(n2)
    assert 4 * off == len(raw) and sizes != meta['unit_sizes']
    open(os.path.join(dst, 'shard_tp0_0.bin'), 'wb').write(b''.join(out))
    meta['unit_sizes'] = sizes
    json.dump(meta, open(os.path.join(dst, 'meta.json'), 'w'))


def check_export(path, dump):
    """the safetensors file: u64 header length, JSON header whose tensors
    cover the data contiguously, the dense tensors then moe_<name>.<layer>
    of every MoE layer with their shapes; the data bitwise the step-10
    dense and MoE parameters (dumped in canonical order)"""
    raw = open(path, 'rb').read()
    hl = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])
    data = raw[8 + hl:]
    spans = sorted(tuple(v['data_offsets']) for k, v in hdr.items() if k != '__metadata__')
    contiguous = spans[0][0] == 0 and spans[-1][1] == len(data) and all(
        a[1] == b[0] for a, b in zip(spans, spans[1:]))
    dense = open(os.path.join(dump, 'params_%d.bin' % test_moe.STEPS), 'rb').read()
    moe = open(os.path.join(dump, 'moe_params_%d.bin' % test_moe.STEPS), 'rb').read()
    r0 = hdr.get('moe_router.0', {})
    w1 = hdr.get('moe_fcprojw.1', {})
    mlp = [data[hdr[k]['data_offsets'][0]:hdr[k]['data_offsets'][1]]
           for k in ('fcw', 'fcb', 'fcprojw', 'fcprojb')]
    ok = (contiguous and data == dense + moe and r0.get('shape') == [8, 32] and
          all(m and not any(m) for m in mlp) and
          w1.get('shape') == [8, 32, 128] and r0.get('data_offsets', [0])[0] == len(dense))
    print('export %s: %d tensors, moe_router.0 %s, moe_fcprojw.1 %s, dense MLP %s, data %s '
          'the step-10 parameters  %s' % (os.path.basename(path), len(hdr) - 1, r0.get('shape'),
                                          w1.get('shape'), '0' if all(
                                              m and not any(m) for m in mlp) else 'not 0',
                                          '==' if data == dense + moe else '!=',
                              'ok' if ok else 'FAIL'))
    return 0 if ok else 1


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = license_tokens(make_tokens, work)
    args = test_moe.ARGS + ['--data', data]
    failures = 0

    def dumped(tag):  # the step-10 parameters (dump of every step's params)
        return ['--dump-dir', os.path.join(work, 'dump_' + tag), '--dump-steps',
                str(test_moe.STEPS)]

    # 1. uninterrupted ep 2, checkpoint at 5
    ck = os.path.join(work, 'ck_ep2')
    export = os.path.join(work, 'ep2.safetensors')
    ref = run_world(rank_bin, args + ['--ep', '2', '--checkpoint-every', '5', '--checkpoint-dir',
                                      ck, '--export-safetensors', export] + dumped('ep2'), work,
                    'ep2', 2)
    if ref is None:
        print('FAIL: the uninterrupted ep 2 run failed')
        return 1
    ref = ref[0]
    s5 = os.path.join(ck, 'step_5')
    meta = json.load(open(os.path.join(s5, 'moe.json')))
    size = os.path.getsize(os.path.join(s5, 'moe.bin'))
    ok = (meta['experts'] == 8 and size == 3 * 4 * meta['num_params'] and
          os.path.exists(os.path.join(s5, 'meta.json')))
    print('step_5: moe.json %s, moe.bin %d bytes %s' % (meta, size, 'ok' if ok else 'FAIL'))
    failures += not ok
    failures += check_export(export, os.path.join(work, 'dump_ep2'))
    old5 = os.path.join(work, 'ck_old', 'step_5')
    old_layout(s5, old5)
    cases = [('ep2', 2, ['--ep', '2']), ('one', 1, []), ('ep4', 4, ['--ep', '4']),
             ('cp2ep2z1', 2, ['--cp', '2', '--ep', '2', '--zero', '1']),
             ('tp2', 2, ['--tp', '2']), ('old_layout', 2, ['--ep', '2'])]
    resumed = {}
    for name, world, extra in cases:
        tag = 'resume_' + name
        runs = run_world(rank_bin, args + extra + ['--resume', old5 if name == 'old_layout'
                                                   else s5] + dumped(tag), work, tag, world)
        resumed[name] = runs
        if runs is None:
            print('FAIL %s: a rank failed' % tag)
            failures += 1
            continue
        bad, worst = compare(tag, runs, ref, 6)
        perr = param_err(os.path.join(work, 'dump_' + tag), os.path.join(work, 'dump_ep2'))
        if not perr <= TOL:
            bad.append('step-10 parameters rel %.1e' % perr)
        print('%-18s steps 6-10 worst rel %.1e, step-10 params rel %.1e  %s' % (
            tag, worst, perr, 'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)

    # 2. the older layout's resume is the same run, bit for bit
    a, b = resumed['old_layout'], resumed['ep2']
    same = a is not None and b is not None and [
        [(m['loss'], m['grad_norm']) for m in r] for r in a] == [
        [(m['loss'], m['grad_norm']) for m in r] for r in b] and all(
        open(os.path.join(work, 'dump_resume_' + n, f % test_moe.STEPS), 'rb').read() ==
        open(os.path.join(work, 'dump_resume_ep2', f % test_moe.STEPS), 'rb').read()
        for n in ('old_layout',) for f in ('params_%d.bin', 'moe_params_%d.bin'))
    print('old layout (MoE units with their dense MLP) resumes as step_5 itself: %s' % (
        'ok' if same else 'FAIL'))
    failures += not same

    # 4. another model is refused, naming the values
    for extra, needle in ((['--experts', '4'], 'experts=8, the model has experts=4'),
                          (['--experts', '0'], 'holds a mixture of experts')):
        p = subprocess.run([rank_bin] + args + extra + ['--resume', s5], capture_output=True,
                           text=True, timeout=120)
        ok = p.returncode != 0 and needle in p.stdout + p.stderr
        print('reject %-40s exit %d %s' % (needle, p.returncode, 'ok' if ok else 'FAIL'))
        if not ok:
            print((p.stdout + p.stderr)[-800:])
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
