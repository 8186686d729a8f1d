#!/usr/bin/env python3
"""test_pp_fail.py: a misconfigured pipeline fails, it never hangs
(integration; issue 10).

Two ranks of pp 2 that disagree on the micro-batches (rank 0 runs 2 of 4
sequences, rank 1 runs 4 of 2: each rank's own configuration is valid, the
pair is not): stage 1 waits for an activation of a size stage 0 never
sends. With PX_COMM_TIMEOUT_MS = 3000 both ranks must exit non-zero within
the deadline plus a margin (not hang), and their logs must name the
pipeline's failed exchange. Then the submit-time errors of parallax-rank's
validator: fewer layers than stages, a batch not divisible by dp x
micro-batches, a bad --stage-layers, an unknown schedule, and interleaved
1F1B's: layers not divisible by pp x V, micro-batches not a multiple of pp,
V > 1 with another schedule, V < 2 with interleaved, --stage-layers with it.
usage: test_pp_fail.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import free_port, license_tokens  # noqa: E402

TIMEOUT_MS = 3000
MARGIN_S = 20


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    base = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
            '--steps', '3', '--data', data, '--pp', '2']
    failures = 0
    port = free_port()
    procs = []
    t0 = time.time()
    for r, m in ((0, '2'), (1, '4')):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE='2', PX_MASTER_ADDR='127.0.0.1',
                   PX_MASTER_PORT=str(port), PX_COMM_TIMEOUT_MS=str(TIMEOUT_MS),
                   # the pipeline's own mismatch check: past the world-start comparison
                   PX_WORLD_CONFIG_CHECK='0')
        log = open(os.path.join(work, 'mismatch_rank%d.log' % r), 'w')
        procs.append((subprocess.Popen([rank_bin] + base + ['--micro-batches', m], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(timeout=TIMEOUT_MS / 1000.0 + MARGIN_S))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append('hung')
        log.close()
    took = time.time() - t0
    logs = [open(os.path.join(work, 'mismatch_rank%d.log' % r)).read() for r in range(2)]
    named = ['pipeline' in lg for lg in logs]
    ok = all(rc not in (0, 'hung') for rc in rcs) and any(named)
    print('mismatched micro-batches: exit %s after %.1f s (deadline %.1f s), pipeline named '
          'in logs %s %s' % (rcs, took, TIMEOUT_MS / 1000.0, named, 'ok' if ok else 'FAIL'))
    if not ok:
        for r, lg in enumerate(logs):
            print('--- rank %d:\n%s' % (r, lg[-2000:]))
    failures += not ok

    # submit-time errors (the one validator, jobcfg.h), before any rank talks
    cases = [
        (['--layers', '2', '--pp', '3'], 'layers=2 is fewer than pp=3 pipeline stages'),
        (['--layers', '2', '--pp', '2', '--micro-batches', '3'],
         'batch=8 is not divisible by dp=1 x grad_accum=1 x micro_batches=3'),
        (['--layers', '4', '--pp', '2', '--stage-layers', '3,2'],
         "stage_layers='3,2' sums to 5, layers=4"),
        (['--layers', '2', '--pp', '2', '--zero', '3'],
         'zero=3 with pp=2: pipeline parallelism runs with ZeRO 0 and 1 so far'),
        (['--layers', '2', '--pp', '2', '--schedule', 'zb2'],
         "'zb2' is not gpipe, 1f1b, zb1 or interleaved"),
        # interleaved 1F1B (Megatron-LM's rules)
        (['--layers', '6', '--pp', '2', '--micro-batches', '2', '--schedule', 'interleaved',
          '--virtual-stages', '2'],
         'layers=6 is not divisible by pp=2 x virtual_stages=2'),
        (['--layers', '4', '--pp', '2', '--micro-batches', '1', '--schedule', 'interleaved',
          '--virtual-stages', '2'],
         'micro_batches=1 is not a multiple of pp=2'),
        (['--layers', '4', '--pp', '2', '--micro-batches', '2', '--schedule', '1f1b',
          '--virtual-stages', '2'],
         'virtual_stages=2 with schedule 1f1b: model chunks per stage need schedule interleaved'),
        (['--layers', '4', '--pp', '2', '--micro-batches', '2', '--schedule', 'interleaved',
          '--virtual-stages', '1'],
         'schedule interleaved with virtual_stages=1: it needs at least 2 model chunks'),
        (['--layers', '4', '--pp', '2', '--micro-batches', '2', '--schedule', 'interleaved',
          '--virtual-stages', '2', '--stage-layers', '3,1'],
         "stage_layers='3,1' with schedule interleaved"),
    ]
    common = ['--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8', '--steps', '1',
              '--data', data]
    for extra, want in cases:
        env = dict(os.environ)
        for k in ('PX_RANK', 'PX_WORLD_SIZE', 'PX_MASTER_ADDR', 'PX_MASTER_PORT'):
            env.pop(k, None)
        pp = int(extra[extra.index('--pp') + 1])
        # the layout check needs the world: pp ranks; the config check comes first
        env.update(PX_RANK='0', PX_WORLD_SIZE=str(pp), PX_MASTER_ADDR='127.0.0.1',
                   PX_MASTER_PORT=str(free_port()), PX_COMM_TIMEOUT_MS='2000')
        r = subprocess.run([rank_bin] + common + extra, env=env, capture_output=True, text=True,
                           timeout=60)
        out = r.stdout + r.stderr
        ok = r.returncode != 0 and want in out
        print('%-60s exit %d %s' % (' '.join(extra), r.returncode,
                                    'ok' if ok else 'FAIL: wanted %r in:\n%s' % (want, out[-800:])))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
