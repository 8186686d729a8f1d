#!/usr/bin/env python3
"""test_cp_fail.py: a broken context-parallel ring fails, it never hangs
(integration; issue 11).

  1. Two ranks of cp 2 that disagree on the batch (rank 0 --batch 2, rank 1
     --batch 4: each valid alone, the pair is not): their k|v blocks differ
     in size, so the ring's first exchange is a mismatch.
  2. A running cp 2 job whose rank 1 is killed (SIGKILL) after its first
     step: rank 0 is left waiting for a k|v or dk|dv block that never comes.
With PX_COMM_TIMEOUT_MS = 3000 the surviving ranks must exit non-zero within
the deadline plus a margin, and (case 1) every rank's log must name the
ring's first exchange failing with a mismatch (not a later timeout).
usage: test_cp_fail.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import free_port, license_tokens  # noqa: E402

TIMEOUT_MS = 3000
MARGIN_S = 20


def launch(rank_bin, work, tag, per_rank):
    port = free_port()
    procs = []
    for r, args in enumerate(per_rank):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(len(per_rank)),
                   PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port),
                   PX_COMM_TIMEOUT_MS=str(TIMEOUT_MS),
                   # the ring's own mismatch check: past the world-start comparison
                   PX_WORLD_CONFIG_CHECK='0')
        metrics = os.path.join(work, '%s_rank%d.jsonl' % (tag, r))
        if os.path.exists(metrics):  # a previous run's: not this run's first step
            os.remove(metrics)
        log = open(os.path.join(work, '%s_rank%d.log' % (tag, r)), 'w')
        procs.append((subprocess.Popen([rank_bin] + args + ['--metrics-out', metrics], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log, metrics))
    return procs


def wait_all(procs, limit):
    rcs = []
    for p, log, _ in procs:
        try:
            rcs.append(p.wait(timeout=limit))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rcs.append('hung')
        log.close()
    return rcs


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    base = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '32', '--data', data,
            '--cp', '2']
    failures = 0

    t0 = time.time()
    procs = launch(rank_bin, work, 'mismatch', [base + ['--batch', '2', '--steps', '3'],
                                                base + ['--batch', '4', '--steps', '3']])
    rcs = wait_all(procs, TIMEOUT_MS / 1000.0 + MARGIN_S)
    took = time.time() - t0
    logs = [open(os.path.join(work, 'mismatch_rank%d.log' % r)).read() for r in range(2)]
    # each rank sees the other's block of the wrong size: both name the
    # mismatch (not a later timeout: a failed request seen by a progress
    # poke must be reported, not dropped)
    named = ['ring attention: the k|v exchange of step 0 failed: mismatch' in lg for lg in logs]
    ok = all(rc not in (0, 'hung') for rc in rcs) and all(named)
    print('mismatched batches: exit %s after %.1f s (deadline %.1f s), the ring\'s mismatch '
          'named in logs %s %s' % (rcs, took, TIMEOUT_MS / 1000.0, named,
                                  'ok' if ok else 'FAIL'))
    if not ok:
        for r, lg in enumerate(logs):
            print('--- rank %d:\n%s' % (r, lg[-2000:]))
    failures += not ok

    long = base + ['--batch', '2', '--steps', '100000']
    procs = launch(rank_bin, work, 'killed', [long, long])
    victim = procs[1][0]
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(procs[1][2]) and
                                          os.path.getsize(procs[1][2]) > 0):
        time.sleep(0.2)
    started = os.path.exists(procs[1][2]) and os.path.getsize(procs[1][2]) > 0
    victim.send_signal(signal.SIGKILL)
    t0 = time.time()
    rcs = wait_all(procs[:1], TIMEOUT_MS / 1000.0 + MARGIN_S)
    wait_all(procs[1:], 5)
    took = time.time() - t0
    ok = started and rcs[0] not in (0, 'hung')
    print('rank 1 killed after its first step (%s): rank 0 exit %s after %.1f s %s' % (
        'seen' if started else 'NOT seen', rcs[0], took, 'ok' if ok else 'FAIL'))
    if not ok:
        print(open(os.path.join(work, 'killed_rank0.log')).read()[-2000:])
    failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
