#!/usr/bin/env python3
"""bench_ddp.py: data-parallel training throughput of parallax-rank at dp=2
beside PyTorch DDP over Gloo (../shared/peers/torch_ddp_bench.py) and beside
the machine's limit, in the same run (benchmark, not a test; issue 13).

Per model, REPS rounds (default 3), each running in turn:
  ours       parallax-rank dp=2 (standalone bootstrap), default buckets
  ours-1b    the same with --bucket-mb 4096: one bucket of every layer, started
             only when backward reaches the embedding (no overlap to speak of)
  ddp        torch_ddp_bench.py --world 2 --threads 1 (DDP, bucket_cap_mb 25)
  limit      two independent single-rank parallax-rank runs of half the
             global batch each, started together: the sum of their tokens/s
             (what dp=2 could reach with free communication on these cores)
Every process runs one thread (OPENBLAS_NUM_THREADS=1; the peer gets the
BLAS core parallax-rank logs as OPENBLAS_CORETYPE, as bench_tokens.sh does).
Ours: the median of the per-step global tokens/s over the steps after 3
warm-up steps; each figure is the best of the rounds (the least disturbed
on a shared machine). Prints each figure, the ratios ours/ddp and
ours/limit, and the ms per step rank 0 stayed blocked in the gradient
reduction after backward with buckets and with one bucket (the part of the
communication not hidden behind backward, plus waiting for a slower peer).

Models (global batch B): quick = the quickstart's (4 layers, 4 heads, dim
128, seq 128, B 16); big = 6 layers, 6 heads, dim 384, seq 256, B 8.

--world N runs dp=N (and N single ranks of B/N for the limit) instead of 2.

usage: bench_ddp.py [BUILD_DIR] [--models quick,big] [--reps N] [--steps N] [--world N]
Env: TORCH_DDP_BENCH (peer script), PYTHON (the peer's python, /usr/bin/python3)."""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {'quick': (4, 4, 128, 128, 16), 'big': (6, 6, 384, 256, 8)}


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def model_args(m, batch=None):
    L, H, C, T, B = m
    return ['--layers', str(L), '--heads', str(H), '--dim', str(C), '--seq', str(T),
            '--batch', str(batch or B), '--lr', '1e-3']


def median_tok(path):
    r = [json.loads(line)['tokens_per_second'] for line in open(path) if line.strip()][3:]
    return statistics.median(r)


def start_ranks(rank_bin, args, work, tag, world, env_extra):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, OPENBLAS_NUM_THREADS='1', PX_RANK=str(r),
                   PX_WORLD_SIZE=str(world), PX_MASTER_ADDR='127.0.0.1',
                   PX_MASTER_PORT=str(port), **env_extra)
        out = os.path.join(work, '%s_%d.jsonl' % (tag, r))
        log = open(os.path.join(work, '%s_%d.log' % (tag, r)), 'w')
        procs.append((subprocess.Popen([rank_bin] + args + ['--metrics-out', out], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), out, log))
    return procs


def finish(procs):
    for p, _, log in procs:
        if p.wait(timeout=900) != 0:
            raise RuntimeError('a rank failed; see %s' % log.name)
        log.close()
    return [out for _, out, _ in procs]


def ours(rank_bin, m, steps, data, work, extra, world):
    """(tokens/s, ms per step rank 0 was blocked in the gradient reduction
    after backward)"""
    args = model_args(m) + ['--steps', str(steps + 3), '--data', data] + extra
    outs = finish(start_ranks(rank_bin, args, work, 'dp', world, {}))
    w = re.search(r'other collectives ([\d.]+) ms', open(os.path.join(work, 'dp_0.log')).read())
    return median_tok(outs[0]), float(w.group(1)) if w else float('nan')


def limit(rank_bin, m, steps, data, work, world):
    args = model_args(m, m[4] // world) + ['--steps', str(steps + 3), '--data', data]
    started = [start_ranks(rank_bin, args, work, 'single_%d' % i, 1, {}) for i in range(world)]
    outs = [o for s in started for o in finish(s)]
    return sum(median_tok(o) for o in outs)


def ddp(python, peer, m, steps, core, world):
    L, H, C, T, B = m
    env = dict(os.environ, OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1')
    if core:
        env['OPENBLAS_CORETYPE'] = core
    out = subprocess.run([python, peer, '--world', str(world), '--threads', '1', '--layers', str(L),
                          '--heads', str(H), '--dim', str(C), '--seq', str(T), '--batch', str(B),
                          '--steps', str(steps), '--port', str(free_port())],
                         env=env, capture_output=True, text=True, timeout=900)
    m_ = re.search(r'([\d.]+) tokens/s', out.stdout)
    if not m_:
        raise RuntimeError('the DDP peer printed no tokens/s: ' + out.stdout + out.stderr)
    return float(m_.group(1))


def main():
    argv = sys.argv[1:]
    build = argv.pop(0) if argv and not argv[0].startswith('--') else 'build'
    models, reps, steps, world = ['quick', 'big'], 3, 10, 2
    while argv:
        k = argv.pop(0)
        if k == '--models':
            models = argv.pop(0).split(',')
        elif k == '--reps':
            reps = int(argv.pop(0))
        elif k == '--steps':
            steps = int(argv.pop(0))
        elif k == '--world':
            world = int(argv.pop(0))
        else:
            print(__doc__)
            return 2
    rank_bin = os.path.join(build, 'rank', 'parallax-rank')
    peer = os.environ.get('TORCH_DDP_BENCH',
                          os.path.join(HERE, '..', '..', '..', 'shared', 'peers',
                                       'torch_ddp_bench.py'))
    python = os.environ.get('PYTHON', '/usr/bin/python3')
    work = tempfile.mkdtemp(prefix='px_bench_ddp.')
    data = os.path.join(work, 'tokens.bin')
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    subprocess.run([sys.executable, os.path.join(HERE, '..', 'engine', 'make_tokens.py'), data]
                   + lic, check=True, stdout=subprocess.DEVNULL)
    print('dp=%d; load average at start: %s' % (world, open('/proc/loadavg').read().split()[:3]))
    print('%-6s %-5s %10s %10s %10s %10s %9s %9s %9s %14s' % (
        'model', 'round', 'ours', 'ours-1b', 'ddp', 'limit', 'ours/ddp', 'ours/lim',
        'buckets', 'wait ms/1b'))
    for name in models:
        m = MODELS[name]
        best = {'ours': 0.0, 'ours-1b': 0.0, 'ddp': 0.0, 'limit': 0.0}
        for rnd in range(reps):
            got, wait = {}, {}
            got['ours'], wait['ours'] = ours(rank_bin, m, steps, data, work, [], world)
            log = open(os.path.join(work, 'dp_0.log')).read()
            core = (re.search(r'BLAS core (\w+)', log) or [None, None])[1]
            bk = re.search(r'dp gradient buckets: (\d+)', log)
            got['ours-1b'], wait['ours-1b'] = ours(rank_bin, m, steps, data, work,
                                                   ['--bucket-mb', '4096'], world)
            got['ddp'] = ddp(python, peer, m, steps, core, world)
            got['limit'] = limit(rank_bin, m, steps, data, work, world)
            for k in best:
                best[k] = max(best[k], got[k])
            print('%-6s %-5d %10.0f %10.0f %10.0f %10.0f %9.2f %9.2f %9s %6.1f/%6.1f' % (
                name, rnd + 1, got['ours'], got['ours-1b'], got['ddp'], got['limit'],
                got['ours'] / got['ddp'], got['ours'] / got['limit'],
                bk.group(1) if bk else '-', wait['ours'], wait['ours-1b']), flush=True)
        print('%-6s %-5s %10.0f %10.0f %10.0f %10.0f %9.2f %9.2f' % (
            name, 'best', best['ours'], best['ours-1b'], best['ddp'], best['limit'],
            best['ours'] / best['ddp'], best['ours'] / best['limit']), flush=True)
    print('load average at end: %s' % open('/proc/loadavg').read().split()[:3])
    return 0


if __name__ == '__main__':
    sys.exit(main())
