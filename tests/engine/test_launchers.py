#!/usr/bin/env python3
"""test_launchers.py: parallax-rank under Open MPI's mpirun (issue 14).

`mpirun -np 4 parallax-rank ...` with no PX_* variable: the ranks take their
rank and world size from OMPI_COMM_WORLD_RANK / SIZE (transport/px_launcher.h)
and train dp=4. The same job launched with PX_RANK / PX_WORLD_SIZE /
PX_MASTER_PORT (zero_util.run_world) is the reference: every rank's per-step
loss and grad norm match it (zero_util.equivalence_problems, 1e-5), and
step 1's averaged gradients (--dump-dir, gathered to the canonical layout by
the ranks) match tensor by tensor within 1e-4 relative. Open MPI is
installed for the benchmarks; without mpirun the test is skipped (77).

usage: test_launchers.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import array
import json
import math
import os
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_util  # noqa: E402

STEPS = 4


def tensor_problems(a_dir, b_dir):
    layout = json.load(open(os.path.join(a_dir, 'layout.json')))
    a, b = array.array('f'), array.array('f')  # little-endian hosts
    a.frombytes(open(os.path.join(a_dir, 'grads_1.bin'), 'rb').read())
    b.frombytes(open(os.path.join(b_dir, 'grads_1.bin'), 'rb').read())
    bad = []
    if len(a) != layout['num_params'] or len(b) != len(a):
        return ['gradient dumps hold %d and %d floats, expected %d' %
                (len(a), len(b), layout['num_params'])]
    for t in layout['tensors']:
        x = a[t['offset']:t['offset'] + t['size']]
        y = b[t['offset']:t['offset'] + t['size']]
        r = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y))) / max(
            math.sqrt(sum(q * q for q in y)), 1e-30)
        if r > 1e-4:
            bad.append('gradient %s differs by %.2e relative' % (t['name'], r))
    return bad


def main():
    rank_bin, make_tokens, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mpirun = shutil.which('mpirun')
    if not mpirun:
        print('SKIP: no mpirun (Debian openmpi-bin; deploy/test.sh installs it)')
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = zero_util.license_tokens(make_tokens, work)
    job = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
           '--steps', str(STEPS), '--data', data, '--lr', '3e-3', '--seed', '99', '--zero', '1',
           '--dump-steps', '1']
    ref = zero_util.run_world(rank_bin, job + ['--dump-dir', os.path.join(work, 'dump_px')],
                              work, 'px', 4)
    if ref is None:
        print('FAIL: the PX_*-launched run failed')
        return 1
    env = {k: v for k, v in os.environ.items() if not k.startswith('PX_')}
    env['OPENBLAS_NUM_THREADS'] = '1'
    cmd = [mpirun, '--oversubscribe', '-np', '4']
    if os.geteuid() == 0:
        cmd.append('--allow-run-as-root')
    cmd += [rank_bin] + job + ['--dump-dir', os.path.join(work, 'dump_mpi'),
                               '--metrics-out', os.path.join(work, 'mpi_rank%r.jsonl')]
    log = open(os.path.join(work, 'mpirun.log'), 'w')
    try:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            timeout=240).returncode
    except subprocess.TimeoutExpired:
        rc = 'timeout'
    log.close()
    text = open(os.path.join(work, 'mpirun.log')).read()
    if rc != 0:
        print(text[-4000:])
        print('FAIL: mpirun exited %s' % rc)
        return 1
    runs = [[json.loads(l) for l in open(os.path.join(work, 'mpi_rank%d.jsonl' % r))
             if l.strip()] for r in range(4)]
    bad, wl, wn = zero_util.equivalence_problems(runs, ref[0], STEPS, 1e-5, 1e-5)
    bad += tensor_problems(os.path.join(work, 'dump_mpi'), os.path.join(work, 'dump_px'))
    if 'launcher: openmpi' not in text:
        bad.append('rank 0 did not log the Open MPI launch')
    for m, b in zip(runs[0], ref[0]):
        print('step %d: mpirun loss %.7f norm %.6f | PX_* loss %.7f norm %.6f' %
              (m['step'], m['loss'], m['grad_norm'], b['loss'], b['grad_norm']))
    for b in bad:
        print('FAIL: ' + b)
    if bad:
        print(text[-3000:])
        return 1
    print('ok: mpirun -np 4 matches the PX_* launch (loss %.1e, norm %.1e relative; step-1 '
          'gradients per tensor within 1e-4)' % (wl, wn))
    return 0


if __name__ == '__main__':
    sys.exit(main())
