#!/usr/bin/python3
"""bench_ddp.py: data-parallel training throughput of parallax-rank at dp=2
beside PyTorch DDP over Gloo (tests/bench/torch_ddp_bench.py) and beside
the machine's limit, in the same run (benchmark, not a test; issue 13).

Per model, REPS rounds (default 3), each running in turn:
  ours       parallax-rank dp=2 (standalone bootstrap), default buckets
  ours-MB    the same with --bucket-mb MB, for each MB of --bucket-mb (default
             4096: one bucket of every layer, started only when backward
             reaches the embedding, no overlap to speak of)
  ddp        torch_ddp_bench.py --world 2 --threads 1 (DDP, bucket_cap_mb 25)
  limit      two independent single-rank parallax-rank runs of half the
             global batch each, started together: the sum of their tokens/s
             (what dp=2 could reach with free communication on these cores)
Every process runs one thread (OPENBLAS_NUM_THREADS=1; the peer gets the
BLAS core parallax-rank logs as OPENBLAS_CORETYPE, as bench_tokens.sh does;
the line after round 1 names it). Debian's PyTorch computes its GEMMs with
the same OpenBLAS (libblas.so.3), so the core moves both sides alike; a
machine that presets OPENBLAS_CORETYPE keeps it (px_blas_core.h).
Ours: the median of the per-step global tokens/s over the steps after 3
warm-up steps; each figure is the best of the rounds (the least disturbed
on a shared machine). Prints each figure, the ratios ours/ddp and
ours/limit, and the ms per step rank 0 stayed blocked in the gradient
reduction after backward with buckets and with one bucket (the part of the
communication not hidden behind backward, plus waiting for a slower peer).

Models (global batch B): quick = the quickstart's (4 layers, 4 heads, dim
128, seq 128, B 16); big = 6 layers, 6 heads, dim 384, seq 256, B 8.

--world N runs dp=N (and N single ranks of B/N for the limit) instead of 2.
--bucket-mb A,B,.. runs ours once per value (MiB per bucket, as the rank's
flag) beside the default, in the same round; the log of each names its bucket
count (column 'n'). --ours-only skips the peer and the limit (a quicker
comparison of bucket sizes alone; the ratio columns then read 0).

usage: bench_ddp.py [BUILD_DIR] [--models quick,big] [--reps N] [--steps N] [--world N]
                    [--bucket-mb MB[,MB...]] [--ours-only]
Env: TORCH_DDP_BENCH (peer script), PYTHON (the peer's python, /usr/bin/python3)."""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {'quick': (4, 4, 128, 128, 16), 'big': (6, 6, 384, 256, 8)}


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


def ours(rank_bin, m, steps, data, work, extra, world, env=None):
    """(tokens/s, ms per step rank 0 was blocked in the gradient reduction
    after backward)"""
    args = model_args(m) + ['--steps', str(steps + 3), '--data', data] + extra
    outs = finish(start_ranks(rank_bin, args, work, 'dp', world, env or {}))
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
    models, reps, steps, world, variants = ['quick', 'big'], 3, 10, 2, ['4096']
    peers = True
    envs = []
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
        elif k == '--bucket-mb':
            variants = [v for v in argv.pop(0).split(',') if v]
        elif k == '--env':
            envs += [v for v in argv.pop(0).split(',') if '=' in v]
        elif k == '--ours-only':
            peers = False
        else:
            print(__doc__)
            return 2
    rank_bin = os.path.join(build, 'rank', 'parallax-rank')
    peer = os.environ.get('TORCH_DDP_BENCH', os.path.join(HERE, 'torch_ddp_bench.py'))
    python = os.environ.get('PYTHON', '/usr/bin/python3')
    work = tempfile.mkdtemp(prefix='px_bench_ddp.')
    data = os.path.join(work, 'tokens.bin')
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    subprocess.run([sys.executable, os.path.join(HERE, '..', 'engine', 'make_tokens.py'), data]
                   + lic, check=True, stdout=subprocess.DEVNULL)
    print('dp=%d; load average at start: %s' % (world, open('/proc/loadavg').read().split()[:3]))
    cols = ['ours'] + ['ours-' + v for v in variants] + ['ours+' + e for e in envs]
    print('%-6s %-5s' % ('model', 'round') + ''.join(' %14s' % c for c in cols) +
          ' %8s %8s %9s %9s' % ('ddp', 'limit', 'ours/ddp', 'ours/lim'))
    print('%-12s' % '' + ''.join(' %14s' % 'tok/s n wait' for _ in cols))
    for name in models:
        m = MODELS[name]
        runs = dict((k, []) for k in cols + ['ddp', 'limit'])
        for rnd in range(reps):
            got, wait, nb = {}, {}, {}
            for c in cols:
                extra = ['--bucket-mb', c[len('ours-'):]] if c.startswith('ours-') else []
                env = dict([c[len('ours+'):].split('=', 1)]) if c.startswith('ours+') else {}
                got[c], wait[c] = ours(rank_bin, m, steps, data, work, extra, world, env)
                log = open(os.path.join(work, 'dp_0.log')).read()
                bk = re.search(r'dp gradient buckets: (\d+)', log)
                nb[c] = bk.group(1) if bk else '-'
                if c == 'ours':
                    core = (re.search(r'BLAS core (\w+)', log) or [None, None])[1]
            got['ddp'] = ddp(python, peer, m, steps, core, world) if peers else float('inf')
            got['limit'] = limit(rank_bin, m, steps, data, work, world) if peers else float('inf')
            for k in runs:
                runs[k].append(got[k])
            if rnd == 0:  # which kernels both sides ran: figures differ ~2x by it
                print('BLAS core (ours and the peer): %s; OPENBLAS_CORETYPE at start: %s'
                      % (core or 'OpenBLAS default', os.environ.get('OPENBLAS_CORETYPE', 'unset')))
            print('%-6s %-5d' % (name, rnd + 1) +
                  ''.join(' %6.0f %2s %4.0f' % (got[c], nb[c], wait[c]) for c in cols) +
                  ' %8.0f %8.0f %9.2f %9.2f' % (got['ddp'], got['limit'], got['ours'] / got['ddp'],
                                                 got['ours'] / got['limit']) +
                  '  load %s' % open('/proc/loadavg').read().split()[0], flush=True)
        for tag, f in (('best', max), ('median', statistics.median)):
            v = dict((k, f(runs[k])) for k in runs)
            print('%-6s %-6s' % (name, tag) + ''.join(' %14.0f' % v[c] for c in cols) +
                  ' %8.0f %8.0f %9.2f %9.2f' % (v['ddp'], v['limit'], v['ours'] / v['ddp'],
                                                 v['ours'] / v['limit']) +
                  ''.join('  %s/ddp %.2f' % (c, v[c] / v['ddp']) for c in cols[1:]), flush=True)
    print('load average at end: %s' % open('/proc/loadavg').read().split()[:3])
    return 0


if __name__ == '__main__':
    sys.exit(main())
