#!/usr/bin/env python3
"""bench_zero.py: step time of ZeRO stages 0-3 at dp 2 and 4, and how much
of stage 3's all-gather time is hidden behind compute (benchmark, not a test).

Model: 8 layers, 4 heads, dim 224, seq 64 (4.9M parameters), global batch 16,
STEPS steps (default 12); over steps 3.. the best and the median step time
are reported (the best is the figure least disturbed by other load on a
shared machine).
Stage 3 runs twice: with prefetch (the next unit's all-gather is started
before waiting for this one, and the model progresses it between ops) and
with --no-prefetch (every gather started and waited at once: fully exposed).
Each rank measures the time it is blocked waiting for all-gathers and for
reduce-scatters (px_zero_times, logged at the end), averaged over ranks;
hidden = 1 - blocked(prefetch) / blocked(no prefetch), for the all-gathers
alone and for all stage-3 collectives (a wait progresses every pending
request, so with prefetch part of a gather completes inside the next
reduce-scatter's wait: the second figure is the fair one).

usage: bench_zero.py RANK_BIN MAKE_TOKENS_PY WORKDIR [STEPS]"""
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, log_text, run_world  # noqa: E402

MODEL = ['--layers', '8', '--heads', '4', '--dim', '224', '--seq', '64', '--batch', '16']


def waits(work, tag, dp):
    """Per-step all-gather and reduce-scatter wait (ms), averaged over ranks."""
    ag, rs = [], []
    for r in range(dp):
        m = re.search(r'all-gather wait ([\d.]+) ms .*reduce-scatter wait ([\d.]+) ms',
                      log_text(work, tag, r))
        ag.append(float(m.group(1)))
        rs.append(float(m.group(2)))
    return sum(ag) / dp, sum(rs) / dp


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) == 5 else 12
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('%-4s %-14s %12s %12s %12s %14s %14s' % ('dp', 'stage', 'best ms', 'median ms',
                                                   'tokens/s', 'AG wait ms', 'RS wait ms'))
    for dp in (2, 4):
        blocked, blocked_all = {}, {}
        for zero, extra, name in ((0, [], '0'), (1, [], '1'), (2, [], '2'),
                                  (3, [], '3'), (3, ['--no-prefetch'], '3 no-prefetch')):
            tag = 'bench_dp%d_z%s' % (dp, name.replace(' ', '_'))
            runs = run_world(rank_bin, MODEL + ['--steps', str(steps), '--data', data,
                                                '--zero', str(zero)] + extra, work, tag, dp,
                             deadline_s=600)
            if runs is None:
                print('dp %d zero %s failed' % (dp, name))
                return 1
            tps = [m['tokens_per_second'] for m in runs[0][2:]]
            times = [16 * 64 / t * 1e3 for t in tps]
            step_ms, best_ms = statistics.median(times), min(times)
            ag, rs = waits(work, tag, dp)
            blocked[name] = ag
            blocked_all[name] = ag + rs
            print('%-4d %-14s %12.1f %12.1f %12.0f %14.2f %14.2f' % (
                dp, name, best_ms, step_ms, 16 * 64 / best_ms * 1e3, ag, rs))
        if blocked.get('3 no-prefetch'):
            hidden = 1 - blocked['3'] / blocked['3 no-prefetch']
            hidden_all = 1 - blocked_all['3'] / blocked_all['3 no-prefetch']
            print('dp %d: stage 3 all-gather blocked %.2f ms/step with prefetch, %.2f without: '
                  '%.0f%% hidden behind compute; all-gather + reduce-scatter blocked %.2f vs '
                  '%.2f ms: %.0f%% hidden' % (dp, blocked['3'], blocked['3 no-prefetch'],
                                              100 * hidden, blocked_all['3'],
                                              blocked_all['3 no-prefetch'], 100 * hidden_all))
    return 0


if __name__ == '__main__':
    sys.exit(main())
