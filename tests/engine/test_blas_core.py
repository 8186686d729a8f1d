#!/usr/bin/env python3
"""test_blas_core.py: the OpenBLAS core parallax-rank runs (issue 15, unit suite).

The expected core is computed here from /proc/cpuinfo's flags, independently
of the cpuid code under test: AVX-512 F/BW/DQ/VL -> SkylakeX tier, with
avx512_bf16 -> Cooperlake tier, AVX2 + FMA -> Haswell tier (Haswell or Zen:
OpenBLAS runs the Haswell kernels on Zen). Checks, on 3-step training runs:
  * OPENBLAS_CORETYPE and PX_BLAS_* unset: the rank logs one "BLAS core X"
    line, X is of the CPU's best tier, the sgemm check is ok;
  * OPENBLAS_CORETYPE=Prescott preset: kept (source "preset");
  * PX_BLAS_CORETYPE=Haswell (where the CPU runs it): the rank re-executes
    itself with it (core Haswell, source PX_BLAS_CORETYPE, one log line) and
    its losses match the default run's within 1e-5 relative;
  * PX_BLAS_CORETYPE above the CPU's tier: ignored with a warning;
  * PX_BLAS_CORE_REJECTED (what a failed sgemm check re-executes with): the
    rank keeps OpenBLAS's own core and warns;
  * test_kernels logs the same core as the rank (the kernel tests run on it);
  * parallaxd links no OpenBLAS (its ELF needs no libopenblas) and still
    reports, in each of the environments above, the core the rank runs and
    why (`parallaxd --print-config`'s blas-core line, which `pctl nodes`
    shows too: it asks `parallax-rank --blas-core` once at start).

usage: test_blas_core.py RANK_BIN TEST_KERNELS_BIN MAKE_TOKENS_PY WORKDIR PARALLAXD"""
import json
import os
import re
import subprocess
import sys

TIERS = {'prescott': 0, 'nehalem': 0, 'sandybridge': 0, 'core2': 0, 'penryn': 0,
         'barcelona': 0, 'bulldozer': 0, 'piledriver': 0, 'steamroller': 0, 'excavator': 0,
         'haswell': 1, 'zen': 1, 'skylakex': 2, 'cooperlake': 3, 'sapphirerapids': 3}
LINE = re.compile(r'BLAS core (\S+) \(([^;]+);(?: CPU best (\S+); sgemm check (\w+))?')


def cpu_tier():
    flags = set()
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('flags'):
                flags = set(line.split(':', 1)[1].split())
                break
    if {'avx512f', 'avx512bw', 'avx512dq', 'avx512vl'} <= flags:
        return 3 if 'avx512_bf16' in flags else 2
    if {'avx2', 'fma'} <= flags:
        return 1
    return 0


def main():
    rank_bin, kern_bin, make_tokens, work, daemon_bin = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data, '/usr/share/common-licenses/GPL-3'],
                   check=True, stdout=subprocess.DEVNULL)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith('PX_') and k != 'OPENBLAS_CORETYPE'}
    base['OPENBLAS_NUM_THREADS'] = '1'
    fails = 0

    def check(ok, what):
        nonlocal fails
        print('%-70s %s' % (what, 'ok' if ok else 'FAIL'))
        if not ok:
            fails += 1

    daemon_seen = []  # (environment, core the rank ran, its source, the daemon's blas-core)

    def run(name, extra):
        env = dict(base, **extra)
        d = subprocess.run([daemon_bin, '--print-config', '--config', '/dev/null'],
                           env=dict(env, PX_RANK_BIN=rank_bin), capture_output=True, text=True)
        said = re.search(r'^blas-core = (\S+) \(([^;]+);', d.stdout, re.M)
        m = os.path.join(work, name + '.jsonl')
        p = subprocess.run([rank_bin, '--layers', '2', '--heads', '2', '--dim', '32', '--seq',
                            '32', '--batch', '2', '--steps', '3', '--data', data,
                            '--metrics-out', m], env=env, capture_output=True, text=True)
        lines = [LINE.search(l) for l in p.stderr.splitlines() if 'BLAS core ' in l]
        losses = []
        if p.returncode == 0:
            losses = [json.loads(l)['loss'] for l in open(m) if l.strip()]
        if p.returncode != 0 or len(lines) != 1 or not lines[0] or len(losses) != 3:
            print(p.stderr[-2000:])
        elif 'PX_BLAS_CORE_REJECTED' not in extra:  # a rank's own fallback, not the daemon's
            daemon_seen.append((extra, lines[0].group(1), lines[0].group(2).split(':')[0],
                                said.groups() if said else d.stdout[-500:] + d.stderr[-500:]))
        return p, lines, losses

    best = cpu_tier()
    print('CPU tier from /proc/cpuinfo: %d' % best)

    p, lines, ref_losses = run('default', {})
    ok = p.returncode == 0 and len(lines) == 1 and lines[0] is not None
    core = lines[0].group(1) if ok else '?'
    check(ok and (TIERS.get(core.lower(), -1) == best if best else
                  lines[0].group(2) == 'openblas'),
          'unset: core %s is of the CPU\'s best tier %d' % (core, best))
    check(ok and lines[0].group(4) == 'ok', 'unset: sgemm check ok')
    check(len(ref_losses) == 3 and all(0 < l < 20 for l in ref_losses), 'unset: 3 finite losses')

    p, lines, _ = run('preset', {'OPENBLAS_CORETYPE': 'Prescott'})
    ok = p.returncode == 0 and len(lines) == 1 and lines[0] is not None
    check(ok and lines[0].group(1) == 'Prescott' and lines[0].group(2) == 'preset',
          'OPENBLAS_CORETYPE=Prescott preset is kept')

    if best >= 1:
        p, lines, losses = run('px_haswell', {'PX_BLAS_CORETYPE': 'Haswell'})
        ok = p.returncode == 0 and len(lines) == 1 and lines[0] is not None
        check(ok and lines[0].group(1) == 'Haswell' and lines[0].group(2) == 'PX_BLAS_CORETYPE',
              'PX_BLAS_CORETYPE=Haswell: re-executed once on Haswell')
        check(len(losses) == 3 and
              all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, ref_losses)),
              'PX_BLAS_CORETYPE=Haswell: losses match the default core within 1e-5')
    if best < 3:
        above = ['SkylakeX', 'SkylakeX', 'Cooperlake'][best]
        p, lines, _ = run('px_above', {'PX_BLAS_CORETYPE': above})
        ok = p.returncode == 0 and len(lines) == 1 and lines[0] is not None
        check(ok and TIERS.get(lines[0].group(1).lower(), -1) <= best and
              'PX_BLAS_CORETYPE=%s ignored' % above in p.stderr,
              'PX_BLAS_CORETYPE=%s above the CPU: ignored with a warning' % above)

    # the process a failed check re-executes: OpenBLAS's own core, a warning
    p, lines, _ = run('fallback', {'PX_BLAS_CORE_REJECTED': 'Haswell'})
    ok = p.returncode == 0 and len(lines) == 1 and lines[0] is not None
    check(ok and lines[0].group(2).startswith('fallback: Haswell failed the sgemm check') and
          'WARN' in [l for l in p.stderr.splitlines() if 'BLAS core' in l][0],
          'after a failed check: OpenBLAS\'s own core, with a warning')

    k = subprocess.run([kern_bin, 'matmul'], env=base, capture_output=True, text=True)
    kl = [LINE.search(l) for l in k.stderr.splitlines() if 'BLAS core ' in l]
    check(k.returncode == 0 and len(kl) == 1 and kl[0] and kl[0].group(1) == core,
          'test_kernels runs on the rank\'s core %s' % core)

    for extra, core, source, said in daemon_seen:
        check(said == (core, source), 'parallaxd %s: blas-core %s (%s), as the rank ran it'
              % (' '.join('%s=%s' % kv for kv in extra.items()) or '(no BLAS variables)',
                 said[0] if isinstance(said, tuple) else said, source))
    rd = subprocess.run(['readelf', '-d', daemon_bin], capture_output=True, text=True)
    needed = re.findall(r'\(NEEDED\)\s+Shared library: \[([^\]]+)\]', rd.stdout)
    check(rd.returncode == 0 and needed and not [n for n in needed if 'blas' in n.lower()],
          'parallaxd needs no OpenBLAS (NEEDED: %d libraries)' % len(needed))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
