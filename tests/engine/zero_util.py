"""zero_util.py: launch parallax-rank worlds through the standalone bootstrap
(PX_RANK / PX_WORLD_SIZE / PX_MASTER_ADDR / PX_MASTER_PORT) and read their
per-step metrics. Shared by test_zero.py and test_resume.py. Stdlib only."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402


def license_tokens(make_tokens, work):
    """Byte-level tokens of Debian's license texts (every machine has them)
    in work/tokens.bin, made by make_tokens.py; returns the path."""
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data] + lic, check=True,
                   stdout=subprocess.DEVNULL)
    return data


def run_world(rank_bin, args, work, tag, dp, deadline_s=180, expect_fail=False):
    """Runs dp ranks with args; returns a list (per rank) of metric dicts,
    or None after printing the logs when a rank fails. A world whose rank 0
    could not listen on the port picked (another process took it between
    free_port() and the bind) is launched again once on a new port."""
    runs = _run_world(rank_bin, args, work, tag, dp, deadline_s, quiet=True)
    if runs is None and 'cannot listen on port' in log_text(work, tag):
        print('%s: the master port was taken; launching again' % tag)
        runs = _run_world(rank_bin, args, work, tag, dp, deadline_s, quiet=expect_fail)
    elif runs is None and not expect_fail:
        _print_logs(work, tag, dp)
    return runs


def _print_logs(work, tag, dp):
    for r in range(dp):
        print('--- %s rank %d log:' % (tag, r))
        print(log_text(work, tag, r)[-3000:])


def _run_world(rank_bin, args, work, tag, dp, deadline_s, quiet):
    port = free_port()
    procs = []
    for r in range(dp):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(dp),
                   PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port))
        if dp == 1:
            env.pop('PX_WORLD_SIZE')
        metrics = os.path.join(work, '%s_rank%d.jsonl' % (tag, r))
        logp = os.path.join(work, '%s_rank%d.log' % (tag, r))
        log = open(logp, 'w')
        procs.append((subprocess.Popen([rank_bin] + args + ['--metrics-out', metrics], env=env,
                                       stdout=log, stderr=subprocess.STDOUT),
                      metrics, log, logp))
    deadline = time.time() + deadline_s
    ok = True
    for p, _, log, _ in procs:
        try:
            rc = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            print('%s: a rank timed out' % tag)
        log.close()
        ok = ok and rc == 0
    if not ok:
        if not quiet:
            _print_logs(work, tag, dp)
        return None
    return [[json.loads(line) for line in open(m) if line.strip()] for _, m, _, _ in procs]


def log_text(work, tag, rank=0):
    return open(os.path.join(work, '%s_rank%d.log' % (tag, rank))).read()


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def equivalence_problems(runs, base, steps, tol_loss, tol_norm):
    """The checks every layout's run gets against one rank's per-step
    metrics `base`: all ranks report the same loss and grad norm, `steps`
    steps of them, within tol_loss / tol_norm relative of base. Returns the
    problems found (an empty list: none) and the worst loss and grad-norm
    relative errors."""
    bad = []
    for rk, rr in enumerate(runs):
        if [(m['loss'], m['grad_norm']) for m in rr] != \
                [(m['loss'], m['grad_norm']) for m in runs[0]]:
            bad.append('rank %d differs from rank 0' % rk)
    if len(runs[0]) != steps:
        bad.append('%d steps reported' % len(runs[0]))
    worst_l = max(rel(a['loss'], b['loss']) for a, b in zip(runs[0], base))
    worst_n = max(rel(a['grad_norm'], b['grad_norm']) for a, b in zip(runs[0], base))
    if worst_l > tol_loss or worst_n > tol_norm:
        bad.append('loss rel %.1e, norm rel %.1e > %g' % (worst_l, worst_n, tol_loss))
    return bad, worst_l, worst_n
