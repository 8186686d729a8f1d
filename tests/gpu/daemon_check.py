#!/usr/bin/python3
"""daemon_check.py: the daemon section of deploy/gpu-check.sh: multi-rank
jobs through parallaxd on one GPU shared by its ranks, against the same
layouts run standalone.

One parallaxd (loopback ports, a state directory under --work, Prometheus
metrics on) offering --devices DEVICES with --gpu-share N (each GPU as N
device slots); then a dp=2 and a tp=2 job (4 layers, dim 256, seq 256,
batch 16, 20 steps, fp32; --model small: 2 layers, dim 64, seq 64, batch 8,
for the simulated device) submitted with pctl on those slots. While a job
runs: `pctl nodes` and the /metrics lines of the GPUs (parallax_gpu_*; on a
real GPU with sharing, none with parallax_gpu_memory_used_bytes fails).
Each job must complete, and its losses (pctl metrics --json) equal, step
for step within 1e-5 relative, those of the same layout run standalone
(parallax-rank through the standalone bootstrap, on the same device).

Without --gpu-share in parallaxd's --help (a daemon that cannot share a
GPU): SKIP (exit 77) naming that, unless --no-share is given: then the
daemon offers --devices as they are (e.g. sim:2, two simulated devices),
so the driver itself runs where no GPU and no sharing is.

usage: daemon_check.py --parallaxd BIN --pctl BIN --rank BIN --work DIR
                       [--devices cuda|sim:1] [--job-device cuda|sim]
                       [--share N] [--no-share] [--steps N] [--model medium|small]
(sim devices: PX_SIM_DEVICE=1 is set for the daemon, its ranks and the
standalone runs.)"""
import argparse
import json
import os
import shutil
import signal
import struct
import random
import subprocess
import sys
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
for d in (here, os.path.join(here, '..', 'engine'), os.path.join(here, '..')):
    sys.path.insert(0, d)
from pxport import free_port  # noqa: E402
from zero_util import rel, run_world  # noqa: E402

TRAIN = ['--lr', '1e-3', '--seed', '1337', '--warmup', '1']
MODELS = {'medium': ['--layers', '4', '--heads', '4', '--dim', '256', '--seq', '256',
                     '--batch', '16'] + TRAIN,
          'small': ['--layers', '2', '--heads', '4', '--dim', '64', '--seq', '64',
                    '--batch', '8'] + TRAIN}
JOBS = [('dp2', 2, ['--dp', '2']), ('tp2', 2, ['--tp', '2'])]
TOL = 1e-5
TERMINAL = ('completed', 'failed', 'cancelled')


def make_tokens(path, n=400000, vocab=256, seed=7):
    rnd = random.Random(seed)
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack('<%dH' % n, *(rnd.randrange(vocab) for _ in range(n))))


class Daemon:
    def __init__(self, a, env):
        self.a, self.env = a, env
        self.ctl = '127.0.0.1:%d' % free_port()
        self.metrics = '127.0.0.1:%d' % free_port()
        state = os.path.join(a.work, 'state')
        shutil.rmtree(state, ignore_errors=True)
        cmd = [a.parallaxd, '--name', 'gpucheck', '--listen', self.ctl,
               '--peer-listen', '127.0.0.1:%d' % free_port(), '--state-dir', state,
               '--runtime-dir', os.path.join(state, 'run'), '--devices', a.devices,
               '--metrics-listen', self.metrics]
        if not a.no_share:
            cmd += ['--gpu-share', str(a.share)]
        print('$ ' + ' '.join(cmd[1:]))
        self.log = open(os.path.join(a.work, 'parallaxd.log'), 'w')
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def pctl(self, *args, timeout=30):
        return subprocess.run([self.a.pctl, '--server', self.ctl] + list(args), env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def pctl_json(self, *args):
        p = self.pctl(*args, '--json')
        if p.returncode != 0:
            raise RuntimeError('pctl %s: exit %d: %s' % (' '.join(args), p.returncode,
                                                        p.stderr.strip()))
        return json.loads(p.stdout)

    def wait_up(self, deadline_s=30):
        end = time.time() + deadline_s
        while time.time() < end:
            if self.proc.poll() is not None:
                return 'parallaxd exited %d' % self.proc.returncode
            try:
                nodes = self.pctl_json('nodes')
                if nodes and nodes[0].get('alive') and nodes[0].get('devices_total', 0) > 0:
                    return None
            except (RuntimeError, ValueError):
                pass
            time.sleep(0.2)
        return 'parallaxd not up with devices within %d s' % deadline_s

    def gpu_metrics(self):
        try:
            with urllib.request.urlopen('http://%s/metrics' % self.metrics, timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            return ['/metrics: %s' % e]
        return [ln for ln in text.splitlines() if ln.startswith('parallax_gpu_')]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def log_tail(self):
        with open(os.path.join(self.a.work, 'parallaxd.log'), errors='replace') as f:
            return f.read()[-2000:]


def run_job(d, a, data, name, extra):
    """Submits a job, shows the node and the GPU metrics while it runs,
    waits for its end; returns (state, [losses by step], notes)."""
    p = d.pctl('submit', '--name', 'gpucheck-%s' % name, '--data', data, '--devices',
               a.job_device, '--steps', str(a.steps), *MODELS[a.model], *extra)
    if p.returncode != 0:
        return 'refused', [], ['pctl submit: exit %d: %s' % (p.returncode, p.stderr.strip())]
    job = p.stdout.strip().split()[-1]
    shown, state, end = False, '', time.time() + a.deadline
    telemetry = []
    while time.time() < end:
        st = d.pctl_json('status', job)
        state = st.get('state', '')
        if state == 'running' and not shown and st.get('step', 0) >= 1:
            shown = True
            print('-- %s running (step %d): pctl nodes' % (name, st['step']))
            print(d.pctl('nodes').stdout.rstrip())
            lines = telemetry = d.gpu_metrics()
            print('-- /metrics parallax_gpu_* (%d lines)' % len(lines))
            print('\n'.join(lines) if lines else '(none)')
        if state in TERMINAL:
            break
        time.sleep(0.1)
    notes = []
    if shown and a.want_telemetry and \
            not any(ln.startswith('parallax_gpu_memory_used_bytes') for ln in telemetry):
        return 'no telemetry', [], ['%s: /metrics had no parallax_gpu_memory_used_bytes while '
                                    'it ran' % name]
    if not shown:
        notes.append('%s: not seen running with a step done (state %s): pctl nodes and '
                     '/metrics shown after it' % (name, state or '?'))
        print(d.pctl('nodes').stdout.rstrip())
        print('\n'.join(d.gpu_metrics()) or '(no parallax_gpu_ lines)')
    if state not in TERMINAL:
        d.pctl('cancel', job)
        return 'timed out', [], notes + ['%s: not finished within %d s' % (name, a.deadline)]
    if state != 'completed':
        st = d.pctl_json('status', job)
        notes.append('%s: %s: %s' % (name, state, st.get('reason', '')))
        return state, [], notes
    steps = d.pctl_json('metrics', job)
    return state, [(m['step'], m['loss']) for m in steps], notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    for f in ('--parallaxd', '--pctl', '--rank', '--work'):
        ap.add_argument(f, required=True)
    ap.add_argument('--devices', default='cuda', help="parallaxd's --devices")
    ap.add_argument('--job-device', default='', help="pctl submit --devices (default: the "
                    "kind of --devices)")
    ap.add_argument('--share', type=int, default=2, help='--gpu-share N')
    ap.add_argument('--no-share', action='store_true', help='run without --gpu-share')
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--model', choices=sorted(MODELS), default='medium')
    ap.add_argument('--deadline', type=int, default=120, help='seconds a job may take')
    a = ap.parse_args()
    if a.share < 1:
        ap.error('--share %d: at least 1' % a.share)
    a.want_telemetry = not a.no_share and not a.devices.startswith('sim')
    a.job_device = a.job_device or a.devices.split(':')[0].split(',')[0]
    env = dict(os.environ, PX_RANK_BIN=os.path.abspath(a.rank))
    if a.devices.startswith('sim') or a.job_device == 'sim':
        env['PX_SIM_DEVICE'] = '1'
        os.environ['PX_SIM_DEVICE'] = '1'
    if not a.no_share:
        h = subprocess.run([a.parallaxd, '--help'], capture_output=True, text=True, timeout=30)
        if '--gpu-share' not in h.stdout + h.stderr:
            print('daemon: SKIP: this parallaxd has no --gpu-share (a GPU cannot be shared by '
                  'the ranks of a job), so a dp=2 or tp=2 job cannot run through the daemon on '
                  'one GPU')
            return 77
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, 'tokens.bin')
    make_tokens(data)
    d = Daemon(a, env)
    failed = []
    try:
        why = d.wait_up()
        if why:
            print('daemon: FAIL: %s\n%s' % (why, d.log_tail()))
            return 1
        print(d.pctl('nodes').stdout.rstrip())
        for name, world, extra in JOBS:
            t0 = time.time()
            state, losses, notes = run_job(d, a, data, name, extra)
            for n in notes:
                print(n)
            ref = run_world(a.rank, MODELS[a.model] + extra + ['--steps', str(a.steps), '--data', data,
                                                     '--device', a.job_device],
                            a.work, 'standalone-%s' % name, world, deadline_s=a.deadline)
            if state != 'completed' or ref is None:
                failed.append(name)
                print('%s through the daemon: %s; standalone: %s: FAIL' %
                      (name, state, 'failed' if ref is None else 'ok'))
                continue
            base = {m['step']: m['loss'] for m in ref[0]}
            worst = max((rel(l, base[s]) for s, l in losses if s in base), default=None)
            ok = worst is not None and worst <= TOL and len(losses) == a.steps
            print('%s through the daemon on %s (%d steps, %.1f s): losses %s vs standalone %s; '
                  'max rel diff %s (tol %g): %s' %
                  (name, a.devices, len(losses), time.time() - t0,
                   ' '.join('%.6f' % l for _, l in losses[:3]) + ' ...',
                   ' '.join('%.6f' % base[s] for s in sorted(base)[:3]) + ' ...',
                   '-' if worst is None else '%.2e' % worst, TOL, 'PASS' if ok else 'FAIL'))
            if not ok:
                failed.append(name)
    finally:
        d.stop()
    print('daemon: %s' % ('PASS' if not failed else 'FAIL (%s)' % ' '.join(failed)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
