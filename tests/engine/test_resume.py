#!/usr/bin/env python3
"""test_resume.py: checkpoints, resume with re-cut shards, safetensors export
(integration).

Model: 3 layers, 3 heads, dim 33, seq 32 (odd unit sizes), batch 16, 10 steps.
 1. Uninterrupted: ZeRO-3 dp=4, --checkpoint-every 5 (writes step_5, step_10),
    --export-safetensors.
 2. Resume from step_5 for steps 6-10 on: the same layout (ZeRO-3 dp=4),
    dp=2 ZeRO-3, dp=2 ZeRO-1 and one rank ZeRO-0. The losses and grad norms
    of steps 6-10 equal the uninterrupted run's within 1e-5 relative, and the
    final exported weights equal within 1e-5 (max abs over max abs).
 3. Errors: resuming into another model (dim 36) fails with a message naming
    both dims; a checkpoint without meta.json (incomplete) is refused.
 4. The safetensors file follows the format (u64 header length, JSON header,
    F32 data with contiguous offsets); with /usr/bin/python3 and torch
    present, torch reads it back and the tensors match.

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
        d = os.path.join(ck, 'step_%d' % s)
        names = sorted(os.listdir(d)) if os.path.isdir(d) else []
        want = ['meta.json'] + ['shard_%d.bin' % k for k in range(4)]
        print('step_%d: %s %s' % (s, names, 'ok' if names == want else 'FAIL'))
        failures += names != want
    base = {m['step']: m for m in full[0]}
    ref_w = read_safetensors(full_st)
    print('safetensors: %d tensors, wte %s, qkvw %s' % (len(ref_w), ref_w['wte'][0],
                                                        ref_w['qkvw'][0]))
    if ref_w['qkvw'][0] != [3, 99, 33] or len(ref_w) != 16:
        print('FAIL: safetensors shapes')
        failures += 1
    for zero, dp in ((3, 4), (3, 2), (1, 2), (0, 1)):
        tag = 'resume_z%d_dp%d' % (zero, dp)
        st = os.path.join(work, tag + '.safetensors')
        runs = run_world(rank_bin, MODEL + TRAIN + ['--data', data, '--zero', str(zero),
                                                    '--resume', os.path.join(ck, 'step_5'),
                                                    '--export-safetensors', st],
                         work, tag, dp)
        if runs is None:
            print('FAIL %s: a rank failed' % tag)
            failures += 1
            continue
        steps = [m['step'] for m in runs[0]]
        worst = 0.0
        for m in runs[0]:
            b = base[m['step']]
            worst = max(worst, rel(m['loss'], b['loss']), rel(m['grad_norm'], b['grad_norm']))
        w = read_safetensors(st)
        wmax = max(max(abs(x) for x in a) for _, a in ref_w.values())
        wdiff = max(max(abs(x - y) for x, y in zip(w[k][1], ref_w[k][1])) for k in ref_w) / wmax
        ok = steps == list(range(6, 11)) and worst <= TOL and wdiff <= TOL
        print('%-16s steps %s  worst loss/norm rel %.1e  weights rel %.1e %s' % (
            tag, steps, worst, wdiff, 'ok' if ok else 'FAIL'))
        failures += not ok
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
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
