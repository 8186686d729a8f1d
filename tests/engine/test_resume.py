#!/usr/bin/env python3
"""test_resume.py: checkpoints, resume with re-cut shards, safetensors export
(integration).

Model: 3 layers, 3 heads, dim 33, seq 32 (odd unit sizes), batch 16, 10 steps.
 1. Uninterrupted: ZeRO-3 dp=4, --checkpoint-every 5 (writes step_5, step_10:
    meta.json and shard_tp0_<k>.bin), --export-safetensors.
 2. Resume from step_5 for steps 6-10 on: the same layout (ZeRO-3 dp=4),
    dp=2 ZeRO-3, dp=2 ZeRO-1 and one rank ZeRO-0. The losses and grad norms
    of steps 6-10 equal the uninterrupted run's within 1e-5 relative, and the
    final exported weights equal within 1e-5 (max abs over max abs); on the
    same layout all of it bit for bit, the export byte for byte.
    A copy of step_5 rewritten as the format before tensor parallelism
    ("parallax-zero-2", no "tp", shard_<k>.bin) resumes the same way.
 3. Errors: resuming into another model (dim 36) fails with a message naming
    both dims; a checkpoint without meta.json (incomplete) is refused.
 4. The safetensors file follows the format (u64 header length, JSON header,
    F32 data with contiguous offsets); with /usr/bin/python3 and torch
    present, torch reads it back and the tensors match.
 5. Tensor parallelism (model: 2 layers, 4 heads, dim 32, seq 16, batch 8):
    an uninterrupted tp=1 run and a dp1 x tp2 run, both checkpointing at
    step 5 and exporting. The tp=2 export is the tp=1 file: the same header
    bytes, the weights within 1e-5; the tp=2 checkpoint has meta "tp": 2 and
    shard_tp0_0.bin, shard_tp1_0.bin. Its step_5 resumes at dp2 x tp2
    ZeRO-1 (which checkpoints step_8 with 2 x 2 shard files), at tp=1,
    dp2 x tp1 ZeRO-3 and tp=4 ZeRO-2; that step_8 resumes at tp=1; the tp=1
    run's step_5 resumes at dp2 x tp2 ZeRO-3. Each continues with losses,
    grad norms and final weights within 1e-5 of the run that saved it.

usage: test_resume.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import json
import os
import shutil
import struct
import subprocess
import sys
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import log_text, rel, run_world  # noqa: E402

MODEL = ['--layers', '3', '--heads', '3', '--dim', '33', '--seq', '32']
TRAIN = ['--batch', '16', '--steps', '10', '--lr', '1e-3', '--seed', '1337',
         '--grad-clip', '1.5']
TOL = 1e-5
TP_MODEL = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16']
TP_TRAIN = ['--batch', '8', '--steps', '10', '--lr', '1e-3', '--seed', '1337',
            '--grad-clip', '1.0']


def read_safetensors(path):
    with open(path, 'rb') as f:
        blob = f.read()
    (n,) = struct.unpack('<Q', blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    end = 0
    for name, t in sorted(((k, v) for k, v in header.items() if k != '__metadata__'),
                          key=lambda kv: kv[1]['data_offsets'][0]):
        b, e = t['data_offsets']
        assert t['dtype'] == 'F32' and b == end, (name, t, end)
        count = 1
        for d in t['shape']:
            count *= d
        assert e - b == 4 * count, (name, t)
        a = array('f')
        a.frombytes(data[b:e])
        out[name] = (t['shape'], a)
        end = e
    assert end == len(data), 'trailing bytes'
    return out


def weights_rel(w, ref_w):
    """max abs difference over max abs, over every tensor"""
    wmax = max(max(abs(x) for x in a) for _, a in ref_w.values())
    return max(max(abs(x - y) for x, y in zip(w[k][1], ref_w[k][1])) for k in ref_w) / wmax


def header_bytes(path):
    with open(path, 'rb') as f:
        (n,) = struct.unpack('<Q', f.read(8))
        return f.read(n)


def resume_case(rank_bin, args, work, tag, world, base, ref_w, first, exact_st=None):
    """Runs a resume (args carry --resume) exporting its weights; its steps
    must be first..10 with loss and grad norm within TOL of base (step ->
    metrics of the run that saved the checkpoint) and its final weights
    within TOL of ref_w. With exact_st (the saving run's export, same
    layout): the losses, norms and exported file must be those bit for bit,
    as a job restarted from its checkpoint must end where an uninterrupted
    one does (data order and every update a function of the step).
    Returns the number of failures (0 or 1)."""
    st = os.path.join(work, tag + '.safetensors')
    runs = run_world(rank_bin, args + ['--export-safetensors', st], work, tag, world)
    if runs is None:
        print('FAIL %s: a rank failed' % tag)
        return 1
    steps = [m['step'] for m in runs[0]]
    worst = 0.0
    for m in runs[0]:
        b = base[m['step']]
        worst = max(worst, rel(m['loss'], b['loss']), rel(m['grad_norm'], b['grad_norm']))
    wdiff = weights_rel(read_safetensors(st), ref_w)
    ok = steps == list(range(first, 11)) and worst <= TOL and wdiff <= TOL
    exact = ''
    if exact_st:
        with open(st, 'rb') as f, open(exact_st, 'rb') as g:
            same = f.read() == g.read()
        ok = ok and same and worst == 0.0
        exact = '  bitwise %s' % ('equal' if same and worst == 0.0 else 'DIFFERENT')
    print('%-22s steps %s  worst loss/norm rel %.1e  weights rel %.1e%s %s' % (
        tag, steps, worst, wdiff, exact, 'ok' if ok else 'FAIL'))
    return 0 if ok else 1


def check_files(d, want):
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    print('%s: %s %s' % (os.path.basename(d), names, 'ok' if names == want else 'FAIL'))
    return names == want


def tp_cases(rank_bin, data, work):
    """Section 5: tensor-parallel checkpoints. Returns the failures."""
    failures = 0
    common = TP_MODEL + TP_TRAIN + ['--data', data]
    ck1, ck2, ck2b = (os.path.join(work, d) for d in ('ck_tp1', 'ck_tp2', 'ck_tp2b'))
    st1, st2 = (os.path.join(work, f) for f in ('tp1.safetensors', 'tp2.safetensors'))
    ref1 = run_world(rank_bin, common + ['--checkpoint-every', '5', '--checkpoint-dir', ck1,
                                         '--export-safetensors', st1], work, 'tp_full1', 1)
    ref2 = run_world(rank_bin, common + ['--tp', '2', '--checkpoint-every', '5',
                                         '--checkpoint-dir', ck2, '--export-safetensors', st2],
                     work, 'tp_full2', 2)
    if ref1 is None or ref2 is None:
        print('FAIL: an uninterrupted tensor-parallel run failed')
        return 1
    base1 = {m['step']: m for m in ref1[0]}
    base2 = {m['step']: m for m in ref2[0]}
    w1, w2 = read_safetensors(st1), read_safetensors(st2)
    same_header = header_bytes(st1) == header_bytes(st2)
    wdiff = weights_rel(w2, w1)
    ok = same_header and wdiff <= TOL and os.path.getsize(st1) == os.path.getsize(st2)
    print('tp=2 export against tp=1: header %s, weights rel %.1e %s' % (
        'equal' if same_header else 'DIFFERS', wdiff, 'ok' if ok else 'FAIL'))
    failures += not ok
    d5 = os.path.join(ck2, 'step_5')
    failures += not check_files(d5, ['meta.json', 'shard_tp0_0.bin', 'shard_tp1_0.bin'])
    meta = json.load(open(os.path.join(d5, 'meta.json')))
    n = sum(len(a) for _, a in w1.values())
    ok = (meta['tp'], meta['dp'], meta['nshards'], meta['num_params'],
          meta['format']) == (2, 1, 1, n, 'parallax-zero-3')
    print('tp=2 meta.json: tp %s dp %s nshards %s num_params %s (canonical %d) %s' % (
        meta['tp'], meta['dp'], meta['nshards'], meta['num_params'], n, 'ok' if ok else 'FAIL'))
    failures += not ok
    res5 = common + ['--resume', d5]
    failures += resume_case(rank_bin, res5 + ['--dp', '2', '--tp', '2', '--zero', '1',
                                               '--checkpoint-every', '4',
                                               '--checkpoint-dir', ck2b],
                            work, 'tp2_to_dp2tp2_z1', 4, base2, w2, 6)
    failures += not check_files(os.path.join(ck2b, 'step_8'),
                                ['meta.json'] + ['shard_tp%d_%d.bin' % (t, k)
                                                 for t in range(2) for k in range(2)])
    failures += resume_case(rank_bin, res5, work, 'tp2_to_tp1', 1, base2, w2, 6)
    failures += resume_case(rank_bin, res5 + ['--zero', '3'], work, 'tp2_to_dp2tp1_z3', 2,
                            base2, w2, 6)
    failures += resume_case(rank_bin, res5 + ['--tp', '4', '--zero', '2'], work,
                            'tp2_to_tp4_z2', 4, base2, w2, 6)
    failures += resume_case(rank_bin, common + ['--resume', os.path.join(ck2b, 'step_8')],
                            work, 'dp2tp2z1_to_tp1', 1, base2, w2, 9)
    failures += resume_case(rank_bin, common + ['--resume', os.path.join(ck1, 'step_5'),
                                                '--dp', '2', '--tp', '2', '--zero', '3'],
                            work, 'tp1_to_dp2tp2_z3', 4, base1, w1, 6)
    return failures


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data] + lic, check=True,
                   stdout=subprocess.DEVNULL)
    ck = os.path.join(work, 'ckpt')
    failures = 0
    full_st = os.path.join(work, 'full.safetensors')
    full = run_world(rank_bin, MODEL + TRAIN + ['--data', data, '--zero', '3',
                                                '--checkpoint-every', '5', '--checkpoint-dir', ck,
                                                '--export-safetensors', full_st],
                     work, 'full', 4)
    if full is None:
        print('FAIL: uninterrupted run failed')
        return 1
    for s in (5, 10):
        failures += not check_files(os.path.join(ck, 'step_%d' % s),
                                    ['meta.json'] + ['shard_tp0_%d.bin' % k for k in range(4)])
    base = {m['step']: m for m in full[0]}
    ref_w = read_safetensors(full_st)
    print('safetensors: %d tensors, wte %s, qkvw %s' % (len(ref_w), ref_w['wte'][0],
                                                        ref_w['qkvw'][0]))
    if ref_w['qkvw'][0] != [3, 99, 33] or len(ref_w) != 16:
        print('FAIL: safetensors shapes')
        failures += 1
    for zero, dp in ((3, 4), (3, 2), (1, 2), (0, 1)):
        failures += resume_case(rank_bin, MODEL + TRAIN + ['--data', data, '--zero', str(zero),
                                                           '--resume',
                                                           os.path.join(ck, 'step_5')],
                                work, 'resume_z%d_dp%d' % (zero, dp), dp, base, ref_w, 6,
                                exact_st=full_st if (zero, dp) == (3, 4) else None)
    # the format before tensor parallelism: no "tp", files shard_<k>.bin
    legacy = os.path.join(work, 'legacy_step_5')
    shutil.copytree(os.path.join(ck, 'step_5'), legacy)
    meta = json.load(open(os.path.join(legacy, 'meta.json')))
    del meta['tp']
    meta['format'] = 'parallax-zero-2'
    json.dump(meta, open(os.path.join(legacy, 'meta.json'), 'w'))
    for k in range(meta['nshards']):
        os.rename(os.path.join(legacy, 'shard_tp0_%d.bin' % k),
                  os.path.join(legacy, 'shard_%d.bin' % k))
    failures += resume_case(rank_bin, MODEL + TRAIN + ['--data', data, '--resume', legacy],
                            work, 'resume_zero2_format', 1, base, ref_w, 6)
    # another model cannot be re-cut: a clear error, no training
    r = run_world(rank_bin, ['--layers', '3', '--heads', '3', '--dim', '36', '--seq', '32'] +
                  TRAIN + ['--data', data, '--resume', os.path.join(ck, 'step_5')],
                  work, 'bad_dim', 1, expect_fail=True)
    msg = log_text(work, 'bad_dim')
    ok = r is None and 'it has dim 33, this job 36' in msg
    print('resume into dim 36: %s' % ('refused ok' if ok else 'FAIL'))
    failures += not ok
    inc = os.path.join(work, 'incomplete')
    shutil.copytree(os.path.join(ck, 'step_5'), inc)
    os.unlink(os.path.join(inc, 'meta.json'))
    r = run_world(rank_bin, MODEL + TRAIN + ['--data', data, '--resume', inc], work,
                  'incomplete', 1, expect_fail=True)
    ok = r is None and 'incomplete or missing checkpoint' in log_text(work, 'incomplete')
    print('resume from a checkpoint without meta.json: %s' % ('refused ok' if ok else 'FAIL'))
    failures += not ok
    # PyTorch reads the export (torch lives in the system python)
    if os.path.exists('/usr/bin/python3'):
        code = ('import json,struct,sys,torch\n'
                'b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]\n'
                'h=json.loads(b[8:8+n]); d=bytearray(b[8+n:])\n'
                't={k:torch.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]],'
                'dtype=torch.float32).view(v["shape"]) for k,v in h.items() if k!="__metadata__"}\n'
                'print(tuple(t["qkvw"].shape), float(t["lnfw"].sum()))\n')
        p = subprocess.run(['/usr/bin/python3', '-c', code, full_st], capture_output=True,
                           text=True)
        if p.returncode == 0:
            shape, s = p.stdout.split(')')
            want = sum(ref_w['lnfw'][1])
            ok = shape.strip() == '(3, 99, 33' and abs(float(s) - want) < 1e-4
            print('torch reads the export: %s%s' % (p.stdout.strip(), ' ok' if ok else ' FAIL'))
            failures += not ok
        else:
            print('torch not available here (%s): skipped that check' %
                  p.stderr.strip().splitlines()[-1:])
    failures += tp_cases(rank_bin, data, work)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
