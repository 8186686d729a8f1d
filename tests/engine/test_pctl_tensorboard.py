#!/usr/bin/python3
"""pctl metrics --tensorboard DIR, read back by TensorBoard itself.

Two runs ("demo" and "a/b", whose '/' must not make a directory level) from
a fixed metrics set (--from-json, no daemon), written as event files and
read with TensorBoard's EventAccumulator, which checks every record's
masked CRC-32C: every scalar (train/loss, train/grad_norm, train/lr,
train/tokens_per_second, val/loss after the steps that had one, train/mfu
on the steps with one) at its step and wall time, values equal as float32.
--json and --csv carry mfu where a step has one.

usage: test_pctl_tensorboard.py PCTL WORKDIR [TENSORBOARD_PATH]
TENSORBOARD_PATH: a folder holding the tensorboard package (deploy/setup.sh
--tests installs it into build/pydeps), put on the reader's PYTHONPATH.
Exit 0 pass, 1 fail, 77 skip (tensorboard not installed)."""
import json
import os
import shutil
import struct
import subprocess
import sys

READER = r'''
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
out = {}
for run in sys.argv[1:]:
    acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    out[run] = {t: [[e.wall_time, e.step, e.value] for e in acc.Scalars(t)]
                for t in acc.Tags()['scalars']}
print(json.dumps(out))
'''


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def main():
    pctl, work = sys.argv[1], sys.argv[2]
    tbpath = sys.argv[3] if len(sys.argv) > 3 else ''
    env = dict(os.environ, PYTHONPATH=tbpath) if tbpath else dict(os.environ)
    if subprocess.run(['/usr/bin/python3', '-c', 'import tensorboard'], env=env,
                      capture_output=True).returncode != 0:
        print('SKIP: the tensorboard package is not installed (deploy/setup.sh --tests)')
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    jobs = {}
    for name, scale in (('demo', 1.0), ('a/b', 0.5)):
        rows = []
        for s in range(1, 7):
            r = {'step': s, 'loss': scale * (5.0 - 0.3 * s), 'grad_norm': 1.0 / s,
                 'lr': 3e-4 * min(1.0, s / 3), 'tokens_per_second': 1000.0 + s,
                 'elapsed_s': 0.5 * s, 'time_ms': 1764800000000 + 1500 * s}
            if s % 3 == 0:
                r['val_loss'] = scale * (5.1 - 0.3 * s)
            if name == 'demo' and s > 1:  # a job with a known peak: MFU from step 2
                r['mfu'] = 0.3 + 0.01 * s
            rows.append(r)
        jobs[name] = rows
    src = os.path.join(work, 'metrics.json')
    json.dump(jobs, open(src, 'w'))
    logdir = os.path.join(work, 'tb')
    r = subprocess.run([pctl, 'metrics', '--from-json', src, '--tensorboard', logdir],
                       capture_output=True, text=True, timeout=30)
    print(r.stdout, r.stderr, end='')
    if r.returncode != 0:
        print('FAIL: pctl exited %d' % r.returncode)
        return 1
    runs = sorted(os.listdir(logdir))
    fails = []
    if runs != ['a_b', 'demo']:
        fails.append('runs %s, expected a_b and demo' % runs)
    got = json.loads(subprocess.run(['/usr/bin/python3', '-c', READER] +
                                    [os.path.join(logdir, d) for d in runs], env=env,
                                    capture_output=True, text=True, check=True).stdout)
    for name, rows in jobs.items():
        run = got.get(os.path.join(logdir, name.replace('/', '_')), {})
        want = {'train/loss': [(r['step'], r['loss']) for r in rows],
                'train/grad_norm': [(r['step'], r['grad_norm']) for r in rows],
                'train/lr': [(r['step'], r['lr']) for r in rows],
                'train/tokens_per_second': [(r['step'], r['tokens_per_second']) for r in rows],
                'val/loss': [(r['step'], r['val_loss']) for r in rows if 'val_loss' in r]}
        if any('mfu' in r for r in rows):
            want['train/mfu'] = [(r['step'], r['mfu']) for r in rows if 'mfu' in r]
        if sorted(run) != sorted(want):
            fails.append('%s: tags %s, expected %s' % (name, sorted(run), sorted(want)))
            continue
        for tag, pts in want.items():
            seen = [(e[1], e[2]) for e in run[tag]]
            if seen != [(s, f32(v)) for s, v in pts]:
                fails.append('%s %s: %s, expected %s' % (name, tag, seen, pts))
            times = [e[0] for e in run[tag]]
            steps = {r['step']: r['time_ms'] / 1e3 for r in rows}
            if any(abs(t - steps[e[1]]) > 1e-3 for t, e in zip(times, run[tag])):
                fails.append('%s %s: wall times %s' % (name, tag, times))
    # --json keeps mfu where a step has one and leaves it out elsewhere;
    # --csv has the mfu column once any step has one, empty on the others
    back = json.loads(subprocess.run([pctl, 'metrics', '--from-json', src, '--json'],
                                     capture_output=True, text=True, check=True).stdout)
    for name, rows in jobs.items():
        got_mfu = [r.get('mfu') for r in back.get(name, [])]
        want_mfu = [r.get('mfu') for r in rows]
        if len(got_mfu) != len(want_mfu) or any(
                (g is None) != (w is None) or (w is not None and abs(g - w) > 1e-9)
                for g, w in zip(got_mfu, want_mfu)):
            fails.append('--json %s mfu %s, expected %s' % (name, got_mfu,
                                                              [r.get('mfu') for r in rows]))
    csv = subprocess.run([pctl, 'metrics', '--from-json', src, '--csv'], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    cells = {(c[0], c[1]): c[-1] for c in (x.split(',') for x in csv[1:])}
    if not csv[0].endswith(',elapsed_s,mfu') or cells.get(('demo', '1')) != '' or \
            abs(float(cells.get(('demo', '6'), 'nan')) - 0.36) > 1e-9 or cells.get(('a/b', '6')) != '':
        fails.append('--csv: header %r, cells %s' % (csv[0], cells))
    for f in fails:
        print('FAIL: ' + f)
    if not fails:
        print('PASS: 2 runs, %d scalars read back by TensorBoard' %
              sum(len(v) for run in got.values() for v in run.values()))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
