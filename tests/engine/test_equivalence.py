#!/usr/bin/env python3
"""test_equivalence.py: data-parallel equivalence of parallax-rank (integration).

With the same seed and global batch (2 layers, 4 heads, dim 64, seq 64, batch
8, 10 steps), runs dp=1, then dp=2 and dp=4 through the standalone bootstrap
(PX_RANK / PX_WORLD_SIZE / PX_MASTER_ADDR=127.0.0.1 / PX_MASTER_PORT=<free
port>), and checks at each of the 10 steps:
  * every rank of a run reports the same loss and grad norm (bitwise),
  * dp=2 and dp=4 losses equal dp=1's within 1e-5 relative,
  * grad norms within 1e-4 relative,
and that training makes progress (last loss < first loss - 0.3).
Data: byte-level tokens of /usr/share/common-licenses/*.

usage: test_equivalence.py RANK_BIN MAKE_TOKENS_PY WORKDIR
Stdlib only. 4 ranks on 2 cores are fine: the transport's waits block."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

ARGS = ['--layers', '2', '--heads', '4', '--dim', '64', '--seq', '64', '--batch', '8',
        '--steps', '10', '--lr', '1e-3', '--seed', '1337']
TOL_LOSS, TOL_NORM = 1e-5, 1e-4
DEADLINE_S = 240


def run(rank_bin, data, work, dp):
    port = free_port()
    procs = []
    for r in range(dp):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(dp),
                   PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port))
        metrics = os.path.join(work, 'dp%d_rank%d.jsonl' % (dp, r))
        log = open(os.path.join(work, 'dp%d_rank%d.log' % (dp, r)), 'w')
        procs.append((subprocess.Popen([rank_bin] + ARGS + ['--data', data, '--metrics-out',
                                                            metrics],
                                       env=env, stdout=log, stderr=subprocess.STDOUT),
                      metrics, log))
    deadline = time.time() + DEADLINE_S
    ok = True
    for p, _, log in procs:
        try:
            rc = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            print('dp=%d: a rank timed out' % dp)
        log.close()
        if rc != 0:
            ok = False
    if not ok:
        for r in range(dp):
            print('--- dp=%d rank %d log:' % (dp, r))
            print(open(os.path.join(work, 'dp%d_rank%d.log' % (dp, r))).read()[-3000:])
        return None
    runs = []
    for _, metrics, _ in procs:
        runs.append([json.loads(line) for line in open(metrics) if line.strip()])
    return runs


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data] + lic, check=True)
    failures = 0
    base = None
    for dp in (1, 2, 4):
        t0 = time.time()
        runs = run(rank_bin, data, work, dp)
        if runs is None:
            print('FAIL dp=%d: a rank failed' % dp)
            failures += 1
            continue
        print('dp=%d: %.1f s' % (dp, time.time() - t0))
        for r, rr in enumerate(runs):
            if len(rr) != 10:
                print('FAIL dp=%d rank %d reported %d steps' % (dp, r, len(rr)))
                failures += 1
            elif [(m['loss'], m['grad_norm']) for m in rr] != \
                    [(m['loss'], m['grad_norm']) for m in runs[0]]:
                print('FAIL dp=%d rank %d differs from rank 0' % (dp, r))
                failures += 1
        if dp == 1:
            base = runs[0]
            continue
        if base is None:
            continue
        for a, b in zip(base, runs[0]):
            el = abs(a['loss'] - b['loss']) / abs(a['loss'])
            en = abs(a['grad_norm'] - b['grad_norm']) / abs(a['grad_norm'])
            ok = el < TOL_LOSS and en < TOL_NORM
            print('  step %2d dp1 %.7f dp%d %.7f rel %.1e  norm rel %.1e %s' % (
                a['step'], a['loss'], dp, b['loss'], el, en, 'ok' if ok else 'FAIL'))
            failures += not ok
    if base is not None and not base[-1]['loss'] < base[0]['loss'] - 0.3:
        print('FAIL no progress: %.4f -> %.4f' % (base[0]['loss'], base[-1]['loss']))
        failures += 1
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
