#!/usr/bin/python3
"""ncu_profile.py: where a training step's GPU time goes, by op family,
from Nsight Compute's per-kernel summary; the profile section of
deploy/gpu-check.sh.

Input: the output of
  ncu --clock-control none --metrics gpu__time_duration.sum \\
      --print-summary per-kernel [-c N] parallax-rank ...
(other lines, the program's own and ncu's ==PROF== ones, are skipped). In
that summary each distinct launch shape of a kernel has a header line
  "  NAME(ARGS) (GX, GY, GZ)x(BX, BY, BZ), [Context C, Stream S, ]Device D,
   CC X.Y, Invocations N"
followed by a table whose gpu__time_duration.sum row gives the unit and
the minimum, maximum and average time. A shape's time is average x
invocations; shapes of one kernel add up.

Each kernel falls into the first family whose pattern its name matches
(FAMILIES, in order): attention, GEMM, conversion, cross-entropy,
layernorm, gelu, bias, adamw, else other.

Output: launches and kernel time (per step with --steps), a table of the
families (ms, share, launches), the largest kernels, and with --step-ms the
step time measured without the profiler beside the kernel time: the
difference is the time the GPU waits between kernels (launch gaps, host
work, synchronisation).

usage: ncu_profile.py NCU_LOG [--steps N] [--step-ms MS] [--top K] [--json]
"""
import argparse
import json
import re
import sys

FAMILIES = [  # (family, pattern on the kernel's name), first match wins
    ('attention', r'attn|attention|flash|fmha|sdpa|mha|^tc_(forward|dq|dkv)|^simt_'),
    ('GEMM', r'gemm|nvjet|cutlass|cublas|xmma|splitKreduce|sm\d+_.*_tn|ampere_|hopper_'),
    ('conversion', r'to_bf16|to_f32|bf16_to|f32_to|convert|cast'),
    ('cross-entropy', r'^ce_|crossentropy|cross_entropy|classifier|logsoftmax'),
    ('layernorm', r'layernorm|layer_norm|^ln_'),
    ('gelu', r'gelu'),
    ('bias', r'bias|colsum'),
    ('adamw', r'adam'),
]
ORDER = [f for f, _ in FAMILIES] + ['other']
UNITS = {'ns': 1e-6, 'nsecond': 1e-6, 'us': 1e-3, 'usecond': 1e-3, 'ms': 1.0,
         'msecond': 1.0, 's': 1e3, 'second': 1e3}
HEADER = re.compile(r'^  (\S.*) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), '
                    r'(?:Context \d+, )?(?:Stream \d+, )?Device \d+, CC [\d.]+, '
                    r'Invocations (\d+)\s*$')
METRIC = re.compile(r'^\s+gpu__time_duration\.sum\s+(\S+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)')


def kernel_name(signature):
    """The kernel's name from its demangled signature: no leading 'void ',
    no argument list (the first '(' outside template brackets), no
    namespace of the launching library kept apart (cublasLt::x stays)."""
    s = signature.strip()
    if s.startswith('void '):
        s = s[5:]
    depth = 0
    for i, ch in enumerate(s):
        if ch == '<':
            depth += 1
        elif ch == '>':
            depth = max(0, depth - 1)
        elif ch == '(' and depth == 0:
            return s[:i]
    return s


def family(name):
    """The op family of a kernel: the first pattern matching its bare name
    (no namespace, no template arguments), else the first matching the
    whole name (a library's generic kernel names its op in a template
    argument: cutlass::Kernel2<..._gemm_...>)."""
    base = re.sub(r'<.*', '', name).split('::')[-1]
    for text in (base, name):
        for fam, pat in FAMILIES:
            if re.search(pat, text, re.IGNORECASE):
                return fam
    return 'other'


def parse(lines):
    """[(kernel name, invocations, total ms)] of every launch shape in the
    summary, in the order given."""
    rows, pending = [], None
    for line in lines:
        m = HEADER.match(line.rstrip('\n'))
        if m:
            pending = (kernel_name(m.group(1)), int(m.group(8)))
            continue
        m = METRIC.match(line)
        if m and pending:
            unit = m.group(1)
            if unit not in UNITS:
                raise ValueError('unknown time unit %r in: %s' % (unit, line.strip()))
            avg = float(m.group(4).replace(',', '')) * UNITS[unit]
            rows.append((pending[0], pending[1], avg * pending[1]))
            pending = None
    return rows


def summarise(rows, steps=1):
    """Totals by kernel and by family, per step (over `steps`)."""
    kernels, fams = {}, {f: [0, 0.0] for f in ORDER}
    for name, inv, ms in rows:
        k = kernels.setdefault(name, [0, 0.0])
        k[0] += inv
        k[1] += ms
        f = fams[family(name)]
        f[0] += inv
        f[1] += ms
    launches = sum(inv for _, inv, _ in rows)
    total = sum(ms for _, _, ms in rows)
    return {'launches': launches / steps, 'kernel_ms': total / steps,
            'families': {f: {'launches': v[0] / steps, 'ms': v[1] / steps}
                         for f, v in fams.items()},
            'kernels': {n: {'launches': v[0] / steps, 'ms': v[1] / steps, 'family': family(n)}
                        for n, v in kernels.items()}}


def report(s, steps, step_ms, top):
    out = []
    per = ' a step (mean over %d steps)' % steps if steps > 1 else ''
    out.append('kernel time %.2f ms in %.0f launches%s' % (s['kernel_ms'], s['launches'], per))
    out.append('%-14s %9s %6s %9s' % ('family', 'ms', 'share', 'launches'))
    tot = s['kernel_ms'] or 1.0
    for f in ORDER:
        v = s['families'][f]
        out.append('%-14s %9.2f %5.1f%% %9.0f' % (f, v['ms'], 100 * v['ms'] / tot, v['launches']))
    if step_ms:
        gap = step_ms - s['kernel_ms']
        out.append('step time %.2f ms (measured without the profiler), kernel time %.2f ms: '
                   'gap %.2f ms (%.1f%% of the step) between kernels' %
                   (step_ms, s['kernel_ms'], gap, 100 * gap / step_ms))
    out.append('largest kernels:')
    ks = sorted(s['kernels'].items(), key=lambda kv: -kv[1]['ms'])[:top]
    for n, v in ks:
        out.append('%9.2f ms %5.1f%% %7.0f  %-13s %s' % (v['ms'], 100 * v['ms'] / tot,
                                                         v['launches'], v['family'], n[:80]))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('log')
    ap.add_argument('--steps', type=int, default=1, help='steps the profiled launches cover')
    ap.add_argument('--step-ms', type=float, default=0.0, help='measured step time (ms)')
    ap.add_argument('--top', type=int, default=12)
    ap.add_argument('--json', action='store_true')
    a = ap.parse_args()
    if a.steps < 1:
        ap.error('--steps %d: at least 1' % a.steps)
    with open(a.log, errors='replace') as f:
        rows = parse(f)
    if not rows:
        print('ncu_profile: no per-kernel summary with gpu__time_duration.sum in %s' % a.log,
              file=sys.stderr)
        return 1
    s = summarise(rows, a.steps)
    if a.json:
        if a.step_ms:
            s['step_ms'] = a.step_ms
            s['gap_ms'] = a.step_ms - s['kernel_ms']
        print(json.dumps(s, indent=1))
    else:
        print(report(s, a.steps, a.step_ms, a.top))
    return 0


if __name__ == '__main__':
    sys.exit(main())
