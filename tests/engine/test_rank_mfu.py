#!/usr/bin/python3
"""MFU in a rank's step metrics and TensorBoard events (CPU, one rank).

With PX_PEAK_TFLOPS forcing a peak, every step of the --metrics-out file
carries mfu = flops x tokens/s / peak (world 1) and the --tensorboard run a
train/mfu scalar equal to it as float32, read back by TensorBoard's
EventAccumulator; the FLOPs a token are computed here by hand (llm.c's
6N + 6LCT, N the layers' 12 C^2 matrices and the 256 x C head). Without the
knob a CPU rank has no peak: no mfu anywhere (absent, not 0). A knob that is
not a number > 0 stops the rank with an error naming it.

usage: test_rank_mfu.py RANK_BIN MAKE_TOKENS WORKDIR [TENSORBOARD_PATH]
Exit 0 pass, 1 fail, 77 skip (tensorboard not installed)."""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_util  # noqa: E402

READER = r'''
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
print(json.dumps({t: [[e.step, e.value] for e in acc.Scalars(t)]
                  for t in acc.Tags()['scalars']}))
'''

L, H, C, T, V, B, STEPS = 2, 4, 32, 16, 256, 8, 4
PEAK_TFLOPS = 0.1  # 100 GFLOP/s: the tiny CPU run lands at a few tenths, far from 0
FLOPS = 6 * (L * 12 * C * C + V * C) + 6 * L * C * T  # 202,752 a token


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def run(rank_bin, data, work, tag, peak):
    env = {k: v for k, v in os.environ.items() if k != 'PX_PEAK_TFLOPS'}
    if peak is not None:
        env['PX_PEAK_TFLOPS'] = peak
    tb = os.path.join(work, tag + '-tb')
    metrics = os.path.join(work, tag + '.jsonl')
    args = [rank_bin, '--layers', str(L), '--heads', str(H), '--dim', str(C), '--seq', str(T),
            '--vocab', str(V), '--batch', str(B), '--steps', str(STEPS), '--data', data,
            '--seed', '5', '--device', 'cpu', '--tensorboard', tb, '--metrics-out', metrics]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    rows = []
    if r.returncode == 0:
        rows = [json.loads(x) for x in open(metrics)]
    return r, tb, rows


def main():
    rank_bin, make_tokens, work = sys.argv[1], sys.argv[2], sys.argv[3]
    tbpath = sys.argv[4] if len(sys.argv) > 4 else ''
    env = dict(os.environ, PYTHONPATH=tbpath) if tbpath else dict(os.environ)
    if subprocess.run(['/usr/bin/python3', '-c', 'import tensorboard'], env=env,
                      capture_output=True).returncode != 0:
        print('SKIP: the tensorboard package is not installed (deploy/setup.sh --tests)')
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = zero_util.license_tokens(make_tokens, work)
    fails = []

    def scalars(tb):
        return json.loads(subprocess.run(['/usr/bin/python3', '-c', READER, tb], env=env,
                                         capture_output=True, text=True, check=True).stdout)

    r, tb, rows = run(rank_bin, data, work, 'forced', str(PEAK_TFLOPS))
    if r.returncode != 0:
        fails.append('forced peak: the rank exited %d: %s' % (r.returncode, r.stderr[-2000:]))
    else:
        got = dict((s, v) for s, v in scalars(tb).get('train/mfu', []))
        if len(rows) != STEPS:
            fails.append('forced peak: %d metric rows, expected %d' % (len(rows), STEPS))
        for m in rows:
            want = FLOPS * m['tokens_per_second'] / (PEAK_TFLOPS * 1e12)
            if 'mfu' not in m or abs(m['mfu'] - want) > 1e-6 * want:
                fails.append('step %d: metrics mfu %s, expected %.9g' % (m['step'], m.get('mfu'),
                                                                         want))
            tv = got.get(m['step'])
            if tv is None or abs(tv - f32(want)) > 1e-6 * want:
                fails.append('step %d: train/mfu %s, expected %.9g' % (m['step'], tv, f32(want)))
            print('step %d tok/s %.1f mfu %.6g (event %s)' % (m['step'], m['tokens_per_second'],
                                                              m.get('mfu', 0), tv))

    r, tb, rows = run(rank_bin, data, work, 'cpu', None)
    if r.returncode != 0:
        fails.append('no peak: the rank exited %d: %s' % (r.returncode, r.stderr[-2000:]))
    else:
        tags = scalars(tb)
        if 'train/mfu' in tags or any('mfu' in m for m in rows) or 'train/loss' not in tags:
            fails.append('no peak on a CPU: tags %s, rows with mfu %d (expected none)' %
                         (sorted(tags), sum('mfu' in m for m in rows)))

    r, tb, rows = run(rank_bin, data, work, 'bad', 'fast')
    if r.returncode == 0 or 'PX_PEAK_TFLOPS=fast' not in r.stderr:
        fails.append('PX_PEAK_TFLOPS=fast: exit %d, stderr %s' % (r.returncode, r.stderr[-500:]))

    for f in fails:
        print('FAIL: ' + f)
    if not fails:
        print('PASS: mfu = %d FLOPs/token x tok/s / %g TFLOP/s in metrics and events; '
              'none without a peak; a bad knob refused' % (FLOPS, PEAK_TFLOPS))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
