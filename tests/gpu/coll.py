#!/usr/bin/python3
"""coll.py: the collectives section of deploy/gpu-check.sh: busbw of
all-reduce, all-gather, reduce-scatter and all-to-all, 2 ranks, sizes
4 KiB - 256 MiB, each path beside the others and beside the copy limit.

Per op, px-coll-bench (transport/tools) runs 2 local ranks three ways:
  * device:  buffers in GPU memory, our device path (CUDA IPC between the
             ranks on one node)            --device cuda
  * staged:  the same buffers staged through pinned host memory
                                           PX_IPC=0 --device cuda
  * host:    buffers in host memory        (no --device)
(--device fake instead: host memory staged as a GPU's would be, so the
driver runs, and is tested, where no GPU is: the device column is then the
fake device's staging.) With --copy-limit, PyTorch times one device-to-
device copy of each size (GB/s = bytes / time): the memory's own speed, the
ceiling our device path is measured against. With --nccl NCCL_BENCH_PY,
NCCL's figures through torch.distributed (nccl_bench.py): 2 ranks where
the machine has 2 GPUs, else world 1 with a line saying the 2-rank figure
cannot be measured on one GPU.

busbw as nccl-tests counts it (all-reduce 2(n-1)/n x algbw, the others
(n-1)/n). Prints one table per op, then the goals on the device path
(64 MiB all-reduce, all-gather, reduce-scatter >= 300 GB/s busbw; 4 KiB
all-reduce <= 30 us: met or not, not a failure); exits 1 when a px-coll-bench run failed
or (with --check) reported wrong elements.

usage: coll.py --bench PX_COLL_BENCH [--device cuda|cuda:K|fake]
               [--min 4K] [--max 256M] [--ops all_reduce,all_gather,...]
               [--copy-limit] [--nccl NCCL_BENCH_PY] [--check]
               [--timeout S (per px-coll-bench run, default 60)]"""
import argparse
import json
import os
import subprocess
import sys

OPS = ['all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all']


def parse_size(s):
    mult = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    s = s.strip().upper()
    try:
        return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError('bad size %r (e.g. 4K, 256M)' % s)


def modes(device):
    """[(column, extra env, px-coll-bench flags)] for a device."""
    if device == 'fake':
        return [('fake-staged', {}, ['--device', 'fake']), ('host', {}, [])]
    return [('device', {}, ['--device', device]),
            ('staged', {'PX_IPC': '0'}, ['--device', device]),
            ('host', {}, [])]


def bench(binary, op, env, flags, a):
    """px-coll-bench's rows {size: row} for one op and path, or an error text."""
    cmd = [binary, '-n', '2', '--op', op, '-b', str(a.min), '-e', str(a.max), '-f', '4',
           '--json'] + flags + (['-c'] if a.check else [])
    try:
        p = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True,
                           timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return 'timed out after %d s' % a.timeout
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith('{')), None)
    if p.returncode != 0 or line is None:
        return 'exit %d: %s' % (p.returncode, (p.stderr or p.stdout).strip()[-300:])
    return {r['size']: r for r in json.loads(line)['rows']}


def copy_limit(sizes, device):
    """{size: GB/s} of one device-to-device copy (torch), or an error text."""
    try:
        import torch
        if not torch.cuda.is_available():
            return 'no CUDA device for torch'
        dev = device if device.startswith('cuda') else 'cuda'
        res = {}
        for size in sizes:
            src = torch.empty(size, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            iters = 200 if size < (1 << 20) else 20
            for _ in range(5):
                dst.copy_(src)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(iters):
                dst.copy_(src)
            t1.record()
            t1.synchronize()
            res[size] = size * iters / (t0.elapsed_time(t1) * 1e-3) / 1e9
            del src, dst
        return res
    except Exception as e:  # no torch, out of memory: the column says why
        return '%s: %s' % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else '')


def nccl(script, a, sizes):
    """({op: {size: row}}, world, notes) from nccl_bench.py's JSON lines."""
    # NCCL runs before the tables, so its limit is kept short (its own
    # deadline, then this one): a hang costs the section that, not more
    limit = max(20, int(1.5 * a.timeout))
    cmd = [sys.executable, script, '--min', str(a.min), '--max', str(a.max),
           '--ops', ','.join(a.ops), '--timeout', str(limit)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 15)
    except subprocess.TimeoutExpired:
        return {}, 0, ['nccl: no result within %d s' % (limit + 15)]
    res, world, notes = {}, 0, []
    for ln in p.stdout.splitlines():
        if ln.startswith('{'):
            j = json.loads(ln)
            world = j['world']
            res[j['op']] = {r['size']: r for r in j['rows']}
        elif ln.strip():
            notes.append(ln.strip())
    if p.returncode != 0:
        notes.append('nccl_bench.py exit %d: %s' % (p.returncode, p.stderr.strip()[-300:]))
    return res, world, notes


def cell(x):
    return '%10.2f' % x if isinstance(x, (int, float)) else '%10s' % '-'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bench', required=True, help='px-coll-bench')
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--min', type=parse_size, default=4 << 10)
    ap.add_argument('--max', type=parse_size, default=256 << 20)
    ap.add_argument('--ops', default=','.join(OPS))
    ap.add_argument('--copy-limit', action='store_true')
    ap.add_argument('--nccl', default='')
    ap.add_argument('--check', action='store_true', help="px-coll-bench -c (counts wrong "
                    "elements)")
    ap.add_argument('--timeout', type=int, default=60)
    a = ap.parse_args()
    a.ops = [o for o in a.ops.split(',') if o]
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        ap.error('unknown op %s (one of %s)' % (', '.join(bad), ', '.join(OPS)))
    if a.min > a.max:
        ap.error('--min %d above --max %d' % (a.min, a.max))
    sizes = []
    s = a.min
    while s <= a.max:
        sizes.append(s)
        s *= 4
    cols = modes(a.device)
    limit = copy_limit(sizes, a.device) if a.copy_limit else None
    nres, nworld, notes = nccl(a.nccl, a, sizes) if a.nccl else ({}, 0, [])
    failed, goals = [], []
    for op in a.ops:
        got = {}
        for name, env, flags in cols:
            got[name] = bench(a.bench, op, env, flags, a)
            if isinstance(got[name], str):
                failed.append('%s %s: %s' % (op, name, got[name]))
                print('%s %s: FAIL: %s' % (op, name, got[name]))
        head = ['%12s' % 'size (B)'] + ['%10s' % n for n, _, _ in cols]
        if limit is not None:
            head += ['%10s' % 'copy', '%10s' % '1st/copy']
        if nres:
            head += ['%10s' % ('nccl' if nworld > 1 else 'nccl w1*')]
        print('%s busbw GB/s, 2 ranks%s' % (op, ', copy: one device-to-device copy of the size '
                                            '(GB/s)' if limit is not None else ''))
        print(' '.join(head))
        for size in sizes:
            row = ['%12d' % size]
            vals = []
            for name, _, _ in cols:
                r = got[name].get(size) if isinstance(got[name], dict) else None
                vals.append(r['busbw'] if r else None)
                if r and r.get('wrong', -1) > 0:
                    failed.append('%s %s %d B: %d wrong elements' % (op, name, size, r['wrong']))
                if isinstance(got[name], dict) and r is None:
                    failed.append('%s %s: no row for %d B' % (op, name, size))
            row += [cell(v) for v in vals]
            if limit is not None:
                c = limit.get(size) if isinstance(limit, dict) else None
                row += [cell(c), cell(vals[0] / c if c and vals[0] is not None else None)]
            if nres:
                r = nres.get(op, {}).get(size)
                row.append(cell((r['busbw'] if nworld > 1 else r['algbw']) if r else None))
            print(' '.join(row))
        dev = got[cols[0][0]] if a.device != 'fake' else None
        if isinstance(dev, dict):
            r = dev.get(64 << 20)
            if r and op != 'all_to_all':
                goals.append('goal %s 64 MiB busbw >= 300 GB/s on the device path: %.1f GB/s: %s'
                             % (op, r['busbw'], 'met' if r['busbw'] >= 300 else 'not met'))
            r = dev.get(4 << 10)
            if r and op == 'all_reduce':
                goals.append('goal all_reduce 4 KiB <= 30 us on the device path: %.1f us: %s' %
                             (r['time_us'], 'met' if r['time_us'] <= 30 else 'not met'))
    for g in goals:
        print(g)
    if isinstance(limit, str):
        print('copy limit: not measured: %s' % limit)
    if nres and nworld <= 1:
        print('nccl w1*: NCCL at world 1 (algbw: a copy within one rank); the 2-rank NCCL '
              'figure cannot be measured on a machine with one GPU (NCCL refuses two ranks on '
              'one GPU)')
    for n in notes:
        print(n)
    print('collectives: %s' % ('PASS' if not failed else 'FAIL (%s)' % '; '.join(failed)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
