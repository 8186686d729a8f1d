#!/usr/bin/python3
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

Ranks run with PX_ZERO_WAIT_LOG=1: the "wait cpu ms" column is the CPU
time a rank's thread spent inside stage 3's waits per step (the copies and
reductions a wait made itself; the rest of the blocked time it slept on
the peer), averaged over ranks, a figure other load on the machine moves
less than the wall times ("nan" where the rank binary has no such log).
The log also gives each rank's blocked time (all-gathers + reduce-scatters)
of its least blocked step and its median step (steps 3..); "hidden" is
computed from those too (least blocked step of each variant, like "best
ms": the figure other load disturbs least; the median step), and from the
interquartile mean of the steps (the mean of the middle half: a robust
estimator of the mean, which a few steps stalled by other load on shared
cores dominate; printed beside the issue's measure, which stays the
headline).

The "hook ms" column is the time per step a rank spent inside the model's
progress hook between kernels (zero.c h_progress): the collectives' own CPU
work done under the compute (on one host the shared-memory path's copies
and reductions, which the calling rank makes itself), averaged over ranks.

--rounds N runs the stage list N times in turn (so prefetch and no-prefetch
alternate under the same drifting load) and ends with the issue's measure on
the mean blocked time of all rounds' steps, beside each round's own figure:
on two shared cores one round's figure moves by tens of points between
identical runs (one stalled step dominates a 10-step mean).

usage: bench_zero.py RANK_BIN MAKE_TOKENS_PY WORKDIR [STEPS] [--dp 2,4]
                     [--stages 0,1,2,3,3np] [--rounds N]   (3np: stage 3 --no-prefetch)"""
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import license_tokens, log_text, run_world  # noqa: E402

MODEL = ['--layers', '8', '--heads', '4', '--dim', '224', '--seq', '64', '--batch', '16']


def waits(work, tag, dp):
    """Per-step all-gather wait, reduce-scatter wait, other collectives and
    progress-hook time, CPU time inside stage 3's waits, and the blocked
    time of the least blocked and the median step (ms), averaged over ranks."""
    tot = [0.0] * 8
    for r in range(dp):
        text = log_text(work, tag, r)
        m = re.search(r'all-gather wait ([\d.]+) ms .*reduce-scatter wait ([\d.]+) ms, '
                      r'other collectives ([\d.]+) ms', text)
        h = re.search(r'progress hook ([\d.]+) ms', text)
        cpu = re.findall(r'zero wait log: .* unit +\d+: +\d+ waits, [\d.]+ ms wall, '
                         r'([\d.]+) ms cpu each', text)
        vals = [float(m.group(1)), float(m.group(2)), float(m.group(3)),
                float(h.group(1)) if h else float('nan'),
                sum(float(c) for c in cpu) if cpu else float('nan')]
        st = re.search(r'blocked per step .*: min ([\d.]+) ms, median ([\d.]+) ms'
                       r'(?:, trimmed mean ([\d.]+) ms)?', text)
        vals += ([float(st.group(1)), float(st.group(2)),
                  float(st.group(3)) if st.group(3) else float('nan')]
                 if st else [float('nan')] * 3)
        tot = [a + b for a, b in zip(tot, vals)]
    return [t / dp for t in tot]


def run_round(rank_bin, data, work, dp, steps, cases):
    """One round: every stage of `cases` once, a row each, then the hidden
    figures of the round; returns {stage name: (AG, AG + RS) blocked
    ms/step} or None when a run failed."""
    blocked, blocked_all, blocked_steps = {}, {}, {}
    for zero, extra, name in cases:
        tag = 'bench_dp%d_z%s' % (dp, name.replace(' ', '_'))
        runs = run_world(rank_bin, MODEL + ['--steps', str(steps), '--data', data,
                                            '--zero', str(zero)] + extra, work, tag, dp,
                         deadline_s=600)
        if runs is None:
            print('dp %d zero %s failed' % (dp, name))
            return None
        tps = [m['tokens_per_second'] for m in runs[0][2:]]
        times = [16 * 64 / t * 1e3 for t in tps]
        step_ms, best_ms = statistics.median(times), min(times)
        ag, rs, other, hook, wcpu, smin, smed, strim = waits(work, tag, dp)
        blocked[name] = ag
        blocked_all[name] = ag + rs
        blocked_steps[name] = (smin, smed, strim)
        print('%-4d %-14s %10.1f %10.1f %9.0f %11.2f %11.2f %11.2f %9.2f %13.2f' % (
            dp, name, best_ms, step_ms, 16 * 64 / best_ms * 1e3, ag, rs, other, hook,
            wcpu), flush=True)
    if blocked.get('3 no-prefetch') and '3' in blocked:
        hidden = 1 - blocked['3'] / blocked['3 no-prefetch']
        hidden_all = 1 - blocked_all['3'] / blocked_all['3 no-prefetch']
        print('dp %d: stage 3 all-gather blocked %.2f ms/step with prefetch, %.2f without: '
              '%.0f%% hidden behind compute; all-gather + reduce-scatter blocked %.2f vs '
              '%.2f ms: %.0f%% hidden' % (dp, blocked['3'], blocked['3 no-prefetch'],
                                          100 * hidden, blocked_all['3'],
                                          blocked_all['3 no-prefetch'], 100 * hidden_all))
        (pmin, pmed, ptrim), (nmin, nmed, ntrim) = (blocked_steps['3'],
                                                    blocked_steps['3 no-prefetch'])
        print('dp %d: stage 3 all-gather + reduce-scatter blocked in the least blocked step '
              '%.2f vs %.2f ms: %.0f%% hidden; median step %.2f vs %.2f ms: %.0f%% hidden' % (
                  dp, pmin, nmin, 100 * (1 - pmin / nmin), pmed, nmed,
                  100 * (1 - pmed / nmed)))
        print('dp %d: robust estimator (not the issue\'s measure): all-gather + '
              'reduce-scatter blocked, interquartile (trimmed) mean over steps 3.., %.2f vs '
              '%.2f ms: %.0f%% hidden' % (dp, ptrim, ntrim, 100 * (1 - ptrim / ntrim)))
    return dict((k, (blocked[k], blocked_all[k])) for k in blocked)


def main():
    argv = sys.argv[1:]
    dps, stages = [2, 4], ['0', '1', '2', '3', '3np']
    rounds = 1
    for flag in ('--dp', '--stages', '--rounds'):
        if flag in argv:
            i = argv.index(flag)
            if i + 1 >= len(argv):
                print(__doc__)
                return 2
            vals = argv[i + 1].split(',')
            del argv[i:i + 2]
            if flag == '--dp':
                dps = [int(v) for v in vals]
            elif flag == '--rounds':
                rounds = int(vals[0])
            else:
                stages = vals
    if len(argv) not in (3, 4) or '--help' in argv or '-h' in argv:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = argv[0:3]
    steps = int(argv[3]) if len(argv) == 4 else 12
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('load average at start: %s' % open('/proc/loadavg').read().split()[:3])
    os.environ['PX_ZERO_WAIT_LOG'] = '1'
    print('%-4s %-14s %10s %10s %9s %11s %11s %11s %9s %13s' % (
        'dp', 'stage', 'best ms', 'median ms', 'tokens/s', 'AG wait ms', 'RS wait ms',
        'other ms', 'hook ms', 'wait cpu ms'))
    cases = {'0': (0, [], '0'), '1': (1, [], '1'), '2': (2, [], '2'), '3': (3, [], '3'),
             '3np': (3, ['--no-prefetch'], '3 no-prefetch')}
    for dp in dps:
        pooled = {'3': [], '3 no-prefetch': []}  # per round: (AG, AG + RS) blocked ms/step
        for rnd in range(rounds):
            if rounds > 1:
                print('dp %d round %d of %d (load %s)' % (dp, rnd + 1, rounds,
                                                       open('/proc/loadavg').read().split()[0]))
            got = run_round(rank_bin, data, work, dp, steps, [cases[s] for s in stages])
            if got is None:
                return 1
            for name in pooled:
                if name in got:
                    pooled[name].append(got[name])
        if rounds > 1 and pooled['3'] and pooled['3 no-prefetch']:
            per = [100 * (1 - p[1] / n[1]) for p, n in zip(pooled['3'], pooled['3 no-prefetch'])]
            ag_p = statistics.mean(p[0] for p in pooled['3'])
            ag_n = statistics.mean(n[0] for n in pooled['3 no-prefetch'])
            all_p = statistics.mean(p[1] for p in pooled['3'])
            all_n = statistics.mean(n[1] for n in pooled['3 no-prefetch'])
            print('dp %d over %d rounds (the issue\'s measure on the mean blocked time of all '
                  'rounds\' steps): all-gather blocked %.2f vs %.2f ms/step: %.0f%% hidden; '
                  'all-gather + reduce-scatter %.2f vs %.2f ms: %.0f%% hidden; per round %s' % (
                      dp, rounds, ag_p, ag_n, 100 * (1 - ag_p / ag_n), all_p, all_n,
                      100 * (1 - all_p / all_n), ' '.join('%.0f%%' % h for h in per)))
    print('load average at end: %s' % open('/proc/loadavg').read().split()[:3])
    return 0


if __name__ == '__main__':
    sys.exit(main())
