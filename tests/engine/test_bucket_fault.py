#!/usr/bin/env python3
"""test_bucket_fault.py: a rank killed while gradient buckets are in flight
fails every other rank, naming it, within the deadline (integration; issue 13).

dp=4 ZeRO-0 with --bucket-mb 0.01 (a bucket per layer, each all-reduce
started during backward and advanced from the model's progress hook), a
long run; once every rank has reported step 3, rank 2 is SIGKILLed. Every
survivor must exit non-zero (never hang) within PX_COMM_TIMEOUT_MS = 3000
plus a margin, and its log must name the dead rank in a collective's
error ("rank 2 ... peer failure"). Then the
same at ZeRO-1 (each unit's reduce-scatter in flight during backward).
PX_UCX_PEER_ERR_MODE=always as the transport's kill tests (UCX 1.13 aborts
a process whose plain-mode endpoint fails inside a shared-memory copy).

usage: test_bucket_fault.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import free_port, license_tokens  # noqa: E402

TIMEOUT_MS = 3000
MARGIN_S = 25
VICTIM = 2


def steps_done(path):
    try:
        return sum(1 for line in open(path) if line.strip())
    except OSError:
        return 0


def one(rank_bin, data, work, tag, extra):
    args = ['--layers', '3', '--heads', '4', '--dim', '64', '--seq', '64', '--batch', '16',
            '--steps', '100000', '--data', data, '--bucket-mb', '0.01'] + extra
    port = free_port()
    procs = []
    for r in range(4):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE='4', PX_MASTER_ADDR='127.0.0.1',
                   PX_MASTER_PORT=str(port), PX_COMM_TIMEOUT_MS=str(TIMEOUT_MS),
                   PX_UCX_PEER_ERR_MODE='always')
        out = os.path.join(work, '%s_rank%d.jsonl' % (tag, r))
        if os.path.exists(out):
            os.unlink(out)
        log = open(os.path.join(work, '%s_rank%d.log' % (tag, r)), 'w')
        procs.append((subprocess.Popen([rank_bin] + args + ['--metrics-out', out], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), out, log))
    t_end = time.time() + 120
    while time.time() < t_end and min(steps_done(o) for _, o, _ in procs) < 3:
        if any(p.poll() is not None for p, _, _ in procs):
            break
        time.sleep(0.05)
    started = min(steps_done(o) for _, o, _ in procs)
    procs[VICTIM][0].send_signal(signal.SIGKILL)
    t0 = time.time()
    rcs = []
    for p, _, log in procs:
        try:
            rcs.append(p.wait(timeout=TIMEOUT_MS / 1000.0 + MARGIN_S))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rcs.append('hung')
        log.close()
    took = time.time() - t0
    logs = [open(os.path.join(work, '%s_rank%d.log' % (tag, r))).read() for r in range(4)]
    bad = []
    if started < 3:
        bad.append('the ranks reported only %d steps before the kill' % started)
    for r in range(4):
        if r == VICTIM:
            continue
        if rcs[r] in (0, 'hung'):
            bad.append('rank %d exit %s' % (r, rcs[r]))
        elif not re.search(r'\brank %d\b[^\n]*peer failure' % VICTIM, logs[r]):
            bad.append('rank %d does not name rank %d' % (r, VICTIM))
    print('%s: killed rank %d after %d steps; survivors exit %s in %.1f s %s' % (
        tag, VICTIM, started, [rc for i, rc in enumerate(rcs) if i != VICTIM], took,
        'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
    if bad:
        for r in range(4):
            print('--- rank %d:\n%s' % (r, logs[r][-1500:]))
    return len(bad)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    failures = one(rank_bin, data, work, 'zero0', [])
    failures += one(rank_bin, data, work, 'zero1', ['--zero', '1'])
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
