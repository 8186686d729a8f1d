#!/usr/bin/env python3
"""test_val_layouts.py: the validation loss (engine/eval.h, issue 14) with
context parallelism, pipeline parallelism and experts equals the one-rank
run's.

A 4-layer GPT on Debian's license texts with a validation file (the same
texts in the other order), 4 steps, evaluated after step 2 and at the end
over 3 fixed batches:
  * dense: one rank against cp=2, dp=2 x cp=2 (each cp rank evaluates its
    load-balanced chunks; the mean over dp x cp), and pp=2 with 1F1B,
    interleaved (2 chunks per stage) and zb1, cp=2 x pp=2 interleaved, tp=2 x
    pp=2 1F1B with ZeRO 1, dp=2 x pp=2 GPipe with grad_accum 2
    (forward-only micro-batches through the stages);
  * experts (8, top-2, capacity 1.0): one rank against ep=2, ep=4 and ep=2
    with ZeRO 3 (the ep group holds the global batch, so routing and
    capacity are the one rank's); the load-balancing loss is not in the
    validation loss, and the experts' token counts each step reports are
    the training batch's alone (the same as a run without validation).
Each validation loss (after steps 2 and 4, and no other) must equal the
reference's within 1e-5 relative, and the training losses too (the
evaluation changes no state). A validation loss that included the aux loss
is caught in ref_gpt.py's MoE case (the PyTorch reference).

Nothing hangs (group fail): two pp=2 ranks that disagree on
--eval-batches (1 and 3) both exit non-zero within the transport's deadline
(PX_COMM_TIMEOUT_MS 3000) plus a margin, a log naming the failed exchange.

usage: test_val_layouts.py RANK_BIN MAKE_TOKENS_PY WORKDIR [GROUP...]
GROUP: dense-cp, dense-pp, moe, fail (default: all)"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_util  # noqa: E402

TOL = 1e-5
MOE = ['--experts', '8', '--top-k', '2', '--capacity-factor', '1.0', '--aux-loss-coef', '0.01']
GROUPS = {
    'dense-cp': ([], [('cp2', 2, ['--cp', '2']),
                      ('dp2cp2', 4, ['--dp', '2', '--cp', '2'])]),
    'dense-pp': ([], [('pp2-1f1b', 2, ['--pp', '2', '--micro-batches', '4',
                                        '--schedule', '1f1b']),
                      ('pp2-int2', 2, ['--pp', '2', '--micro-batches', '4',
                                       '--schedule', 'interleaved', '--virtual-stages', '2']),
                      ('pp2-zb1', 2, ['--pp', '2', '--micro-batches', '4',
                                      '--schedule', 'zb1']),
                      ('cp2pp2-int2', 4, ['--cp', '2', '--pp', '2', '--micro-batches', '4',
                                          '--schedule', 'interleaved', '--virtual-stages', '2']),
                      ('tp2pp2-1f1b', 4, ['--tp', '2', '--pp', '2', '--micro-batches', '2',
                                          '--schedule', '1f1b', '--zero', '1']),
                      ('dp2pp2-gpipe-a2', 4, ['--dp', '2', '--pp', '2', '--micro-batches', '2',
                                              '--schedule', 'gpipe', '--grad-accum', '2'])]),
    'moe': (MOE, [('ep2', 2, ['--ep', '2']), ('ep4', 4, ['--ep', '4']),
                  ('ep2-zero3', 2, ['--ep', '2', '--zero', '3'])]),
}


def losses(runs):
    steps = runs[0]
    return ({m['step']: m['val_loss'] for m in steps if 'val_loss' in m},
            [m['loss'] for m in steps])


TIMEOUT_MS, MARGIN_S = 3000, 20


def disagreeing_eval(rank_bin, base, work):
    """pp=2, stage 0 evaluates 1 batch and stage 1 three: stage 1 waits
    for activations stage 0 never sends. Returns a list of problems."""
    port = zero_util.free_port()
    procs = []
    t0 = time.time()
    args = base + ['--pp', '2', '--micro-batches', '4', '--schedule', '1f1b', '--steps', '2',
                   '--eval-every', '1']
    for r, k in ((0, '1'), (1, '3')):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE='2', PX_MASTER_ADDR='127.0.0.1',
                   PX_MASTER_PORT=str(port), PX_COMM_TIMEOUT_MS=str(TIMEOUT_MS),
                   # the evaluation's own mismatch check: past the world-start comparison
                   PX_WORLD_CONFIG_CHECK='0')
        log = open(os.path.join(work, 'evalfail_rank%d.log' % r), 'w')
        procs.append((subprocess.Popen([rank_bin] + args + ['--eval-batches', k], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(timeout=TIMEOUT_MS / 1000.0 + MARGIN_S))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rcs.append('hung')
        log.close()
    took = time.time() - t0
    logs = [open(os.path.join(work, 'evalfail_rank%d.log' % r)).read() for r in range(2)]
    named = ['eval' in lg and ('pipeline' in lg or 'all-reduce' in lg) for lg in logs]
    print('disagreeing eval batches: exit %s after %.1f s, the evaluation named %s'
          % (rcs, took, named))
    if any(rc in (0, 'hung') for rc in rcs) or not any(named):
        for r, lg in enumerate(logs):
            print('--- rank %d:\n%s' % (r, lg[-2000:]))
        return ['pp=2 ranks disagreeing on eval_batches: exit %s, named %s' % (rcs, named)]
    return []


def main():
    rank_bin, make_tokens, work = sys.argv[1], sys.argv[2], sys.argv[3]
    groups = sys.argv[4:] or list(GROUPS) + ['fail']
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = zero_util.license_tokens(make_tokens, work)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    val = os.path.join(work, 'val.bin')
    subprocess.run([sys.executable, make_tokens, val] + lic[::-1], check=True,
                   stdout=subprocess.DEVNULL)
    base = ['--layers', '4', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
            '--steps', '4', '--data', data, '--lr', '3e-3', '--seed', '77',
            '--val-data', val, '--eval-every', '2', '--eval-batches', '3']
    problems = []
    refs = {}
    if 'fail' in groups:
        problems += disagreeing_eval(rank_bin, base[:-2], work)
    for g in groups:
        if g == 'fail':
            continue
        model, cases = GROUPS[g]
        key = tuple(model)
        if key not in refs:
            runs = zero_util.run_world(rank_bin, base + model, work, 'ref-%s' % g, 1)
            if runs is None:
                problems.append('%s: the one-rank run failed' % g)
                continue
            refs[key] = losses(runs)
            print('%-16s val %s' % ('ref-' + g, ' '.join('%d:%.7f' % kv
                                                         for kv in sorted(refs[key][0].items()))))
        ref = refs[key]
        if sorted(ref[0]) != [2, 4]:
            problems.append('%s: one rank evaluated after steps %s' % (g, sorted(ref[0])))
            continue
        for tag, world, extra in cases:
            runs = zero_util.run_world(rank_bin, base + model + extra, work, tag, world)
            if runs is None:
                problems.append('%s: the run failed' % tag)
                continue
            got, train = losses(runs)
            print('%-16s val %s  train %s' % (tag, ' '.join('%d:%.7f' % kv
                                                          for kv in sorted(got.items())),
                                            ' '.join('%.6f' % x for x in train)))
            if sorted(got) != [2, 4]:
                problems.append('%s: validation after steps %s, expected [2, 4]'
                                % (tag, sorted(got)))
                continue
            for s in (2, 4):
                r = zero_util.rel(got[s], ref[0][s])
                if r > TOL:
                    problems.append('%s: val loss after step %d %.9g vs one rank %.9g (rel %.2e)'
                                    % (tag, s, got[s], ref[0][s], r))
            for s, (a, b) in enumerate(zip(train, ref[1]), 1):
                if zero_util.rel(a, b) > TOL:
                    problems.append('%s: train loss step %d %.9g vs one rank %.9g'
                                    % (tag, s, a, b))
    if 'moe' in groups:  # the evaluation's routing is not counted in the step's
        assert base[-6] == '--val-data'
        a = zero_util.run_world(rank_bin, base[:-6] + MOE + ['--ep', '2'], work, 'ep2-noval', 2)
        b = zero_util.run_world(rank_bin, base + MOE + ['--ep', '2'], work, 'ep2-val', 2)
        if a is None or b is None:
            problems.append('the ep2 runs with and without validation failed')
        else:
            ca = [(m['moe_received'], m['moe_dropped']) for m in a[0]]
            cb = [(m['moe_received'], m['moe_dropped']) for m in b[0]]
            if ca != cb:
                problems.append('ep2: expert token counts change with validation: %s vs %s'
                                % (ca, cb))
    for p in problems:
        print('FAIL: ' + p)
    if problems:
        return 1
    print('ok: the validation loss with %s equals one rank\'s (%g relative)'
          % (', '.join(groups), TOL))
    return 0


if __name__ == '__main__':
    sys.exit(main())
