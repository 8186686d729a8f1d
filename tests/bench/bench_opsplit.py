#!/usr/bin/env python3
"""bench_opsplit.py: where one rank's training step spends its CPU time, op by
op (benchmark, not a test: profile before changing kernels).

Runs one standalone single-rank parallax-rank (the bootstrap bench_ddp.py
uses, OPENBLAS_NUM_THREADS=1) under `perf record --call-graph dwarf` and
charges every sample to one op:
  * the innermost kernel of the CPU op table on its stack (px__cpu_NAME,
    e.g. matmul_forward, attention_backward, gelu_forward, adamw_update;
    the sgemm and libm frames below it count for it);
  * else, with gpt.c/zero.c/train.c above it, the engine function nearest
    to the sample (memset/memcpy of the engine: gradient zeroing, copies);
  * an OpenBLAS frame whose stack ends there (its assembly has no unwind
    information: sgemm_beta, the C zeroing of beta-0 calls, mostly the
    attention's) is 'blas, caller lost';
  * samples under the model's creation and initialisation (px_gpt_create*,
    px_zero_create, init_range) and before the first step are 'init' and
    left out of the step's total.
Prints, per op, its share of the step's samples and its CPU ms per step
(samples / frequency / steps; the first
step, with its page faults, included), largest first, then a line per family
(matmul, attention, layernorm, gelu, residual, crossentropy, encoder,
adamw, zero/copy, other). CPU time, not wall time: on a loaded shared
machine the split stays meaningful while tokens/s does not.

usage: bench_opsplit.py [BUILD_DIR] [--model big|quick] [--batch B]
                        [--steps N] [--freq HZ] [--keep DIR]
B defaults to the model's global batch over 2 (one rank of bench_ddp's
dp=2). Needs perf (linux-perf) allowed to profile its own children."""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {'quick': (4, 4, 128, 128, 16), 'big': (6, 6, 384, 256, 8)}
INIT = re.compile(r'^(px_gpt_create\w*|gpt_create|px_zero_create|init_range|'
                  r'px_gpt_init_unit_range|px_init_\w+|px_blas_core_\w+|_dl_\w+)$')
FAMILY = [('matmul', re.compile(r'matmul')), ('attention', re.compile(r'attention')),
          ('layernorm', re.compile(r'layernorm')), ('gelu', re.compile(r'gelu')),
          ('residual', re.compile(r'residual')), ('crossentropy', re.compile(r'crossentropy')),
          ('encoder', re.compile(r'encoder')), ('adamw', re.compile(r'adamw')),
          ('zero/copy', re.compile(r'memset|memmove|memcpy|mem_set|mem_copy|clear_page|fault')),
          ('blas, caller lost', re.compile(r'^blas'))]


def classify(frames):
    """op name of one sample from its frames (innermost first), or None for
    init"""
    names = [f.split('+')[0] for f in frames]
    if any(INIT.match(n) for n in names):
        return None
    for n in names:
        m = re.match(r'^px__cpu_(\w+?)(\.avx2|\.default)?$', n)
        if m:
            return m.group(1)
    inner = names[0] if names else '?'
    if re.search(r'memset|memmove|memcpy|clear_page|page_fault|exc_page', inner):
        for n in names[1:]:
            if n.startswith('px_') or n in ('col_backward', 'row_backward'):
                return 'zero/copy:' + n
        return 'zero/copy:?'
    if inner.startswith('sgemm_'):  # OpenBLAS asm without unwind info
        return 'blas, caller lost:' + inner
    for n in names:
        if n.startswith('px_') or n.startswith('h_'):
            return 'other:' + n
    return 'other:' + inner


def family(op):
    for fam, rx in FAMILY:
        if rx.search(op):
            return fam
    return 'other'


def main():
    argv = sys.argv[1:]
    build = argv.pop(0) if argv and not argv[0].startswith('--') else 'build'
    model, batch, steps, freq, keep = 'big', None, 8, 499, None
    while argv:
        k = argv.pop(0)
        if k == '--model':
            model = argv.pop(0)
        elif k == '--batch':
            batch = int(argv.pop(0))
        elif k == '--steps':
            steps = int(argv.pop(0))
        elif k == '--freq':
            freq = int(argv.pop(0))
        elif k == '--keep':
            keep = argv.pop(0)
        else:
            print(__doc__)
            return 2
    if model not in MODELS:
        print('bench_opsplit: unknown model %r (quick, big)' % model, file=sys.stderr)
        return 2
    L, H, C, T, B = MODELS[model]
    batch = batch or max(1, B // 2)
    work = keep or tempfile.mkdtemp(prefix='px_opsplit.')
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'tokens.bin')
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    subprocess.run([sys.executable, os.path.join(HERE, '..', 'engine', 'make_tokens.py'), data]
                   + lic, check=True, stdout=subprocess.DEVNULL)
    rank_bin = os.path.join(build, 'rank', 'parallax-rank')
    env = dict(os.environ, OPENBLAS_NUM_THREADS='1', PX_RANK='0', PX_WORLD_SIZE='1',
               PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT='29%03d' % (os.getpid() % 1000))
    pdata = os.path.join(work, 'perf.data')
    cmd = ['perf', 'record', '-q', '-F', str(freq), '--call-graph', 'dwarf,16384', '-o', pdata,
           rank_bin, '--layers', str(L), '--heads', str(H), '--dim', str(C), '--seq', str(T),
           '--batch', str(batch), '--lr', '1e-3', '--steps', str(steps),
           '--data', data, '--metrics-out', os.path.join(work, 'm.jsonl')]
    with open(os.path.join(work, 'rank.log'), 'w') as log:
        subprocess.run(cmd, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
    script = subprocess.run(['perf', 'script', '-i', pdata, '-F', 'period,ip,sym'],
                            capture_output=True, text=True, check=True).stdout
    per_op, total = collections.Counter(), 0
    for block in script.split('\n\n'):
        lines = [ln.strip() for ln in block.strip().split('\n') if ln.strip()]
        if not lines:
            continue
        if not lines[0].split()[0].isdigit():
            continue
        frames = [ln.split()[1] if len(ln.split()) > 1 else ln for ln in lines[1:]]
        op = classify(frames)
        if op is None:
            continue
        per_op[op] += 1
        total += 1
    if not total:
        print('bench_opsplit: no step samples (is perf allowed? see %s)' % work, file=sys.stderr)
        return 1
    print('model %s (L %d H %d C %d T %d) batch %d, %d steps, perf dwarf at %d Hz; '
          'share of the step samples (init left out)' % (model, L, H, C, T, batch, steps, freq))
    fam = collections.Counter()
    ms = 1000.0 / freq / steps  # CPU ms per step of one sample
    print('  %-44s %7s %9s' % ('op', 'share', 'ms/step'))
    for op, p in per_op.most_common():
        fam[family(op)] += p
        if p / total >= 0.002:
            print('  %-44s %6.2f%% %9.1f' % (op, 100.0 * p / total, p * ms))
    print('families:')
    for f, p in fam.most_common():
        print('  %-16s %6.2f%% %9.1f' % (f, 100.0 * p / total, p * ms))
    print('step total %.1f CPU ms per step (samples / freq / steps)' % (total * ms))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
