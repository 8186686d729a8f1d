#!/usr/bin/python3
"""test_gpu_check.py: deploy/gpu-check.sh itself, from a folder shaped as
deploy/gpu-bundle.sh makes it (bin/ with the build's binaries, py/ with the
drivers, links) on a machine without a GPU:
  * `--sim coll daemon`: the coll section runs its CPU form and passes, the
    daemon section passes or SKIPs (a parallaxd without --gpu-share); each
    has a header, a result line with its time, and the summary table lists
    them; exit 0;
  * `--sim ops attn`: both SKIP, exit 0;
  * a section past its limit (PX_CHECK_LIMIT_layouts=3: the layouts take
    far longer) is stopped, FAIL in the table, exit 1, and no process of it
    (driver, ranks) is left behind;
  * an unknown section or a bad limit: exit 2 naming it.
usage: test_gpu_check.py GPU_CHECK_SH SOURCE_ROOT RANK PARALLAXD PCTL COLL_BENCH WORK"""
import os
import re
import shutil
import subprocess
import sys
import time

fails = 0


def check(what, ok, out=''):
    global fails
    print('%s: %s' % (what, 'ok' if ok else 'FAIL'))
    if not ok:
        print(out[-3000:])
    fails += not ok


def run(bundle, args, env=None, timeout=200):
    p = subprocess.run([os.path.join(bundle, 'gpu-check.sh')] + args, capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout + p.stderr


def summary(out):
    """{section: result} from the summary table."""
    part = out.split('=== summary', 1)[-1]
    return {m.group(1): m.group(2) for m in
            re.finditer(r'^(\w+)\s+(PASS|FAIL|SKIP)\s+\d+s\s+\d+s$', part, re.M)}


def main():
    script, src, rank, pxd, pctl, bench, work = sys.argv[1:8]
    shutil.rmtree(work, ignore_errors=True)
    bundle = os.path.join(work, 'bundle')
    for d in ('bin', 'lib', 'py'):
        os.makedirs(os.path.join(bundle, d))
    shutil.copy(script, os.path.join(bundle, 'gpu-check.sh'))
    for b in (rank, pxd, pctl, bench):
        os.symlink(os.path.abspath(b), os.path.join(bundle, 'bin', os.path.basename(b)))
    gpu = os.path.join(src, 'tests', 'gpu')
    for f in os.listdir(gpu):
        if f.endswith('.py') and not f.startswith('test_'):
            os.symlink(os.path.join(gpu, f), os.path.join(bundle, 'py', f))
    for f in ('tests/engine/zero_util.py', 'tests/pxport.py'):
        os.symlink(os.path.join(src, f), os.path.join(bundle, 'py', os.path.basename(f)))
    env = {'PYTHON': sys.executable}

    rc, out = run(bundle, ['--sim', 'coll', 'daemon'], env)
    res = summary(out)
    check('--sim coll daemon: exit 0, coll PASS, daemon PASS or SKIP',
          rc == 0 and res.get('coll') == 'PASS' and res.get('daemon') in ('PASS', 'SKIP') and
          'collectives: PASS' in out and '=== coll (limit 225 s' in out and
          re.search(r'^--- coll: PASS in \d+ s$', out, re.M) and 'gpu-check: PASS' in out, out)

    rc, out = run(bundle, ['--sim', 'ops', 'attn'], env)
    check('--sim ops attn: both SKIP, exit 0',
          rc == 0 and summary(out) == {'ops': 'SKIP', 'attn': 'SKIP'}, out)

    t0 = time.time()
    rc, out = run(bundle, ['--sim', 'layouts'], dict(env, PX_CHECK_LIMIT_layouts='3'))
    time.sleep(0.5)
    left = subprocess.run(['pgrep', '-af', 'layouts.py|px-gpu-check\\.'], capture_output=True,
                          text=True).stdout.strip()
    left = '\n'.join(ln for ln in left.splitlines() if bundle in ln or '/layouts/' in ln)
    check('a section past its limit: FAIL, exit 1, nothing left running (%.0f s)' %
          (time.time() - t0), rc == 1 and summary(out).get('layouts') == 'FAIL' and
          'stopped at its limit of 3 s' in out and not left, out + left)

    rc, out = run(bundle, ['--sim', 'colls'], env)
    check('unknown section: exit 2 naming it', rc == 2 and "unknown section 'colls'" in out, out)
    rc, out = run(bundle, ['--sim', 'coll'], dict(env, PX_CHECK_LIMIT_coll='abc'))
    check('a bad limit: exit 2 naming it', rc == 2 and "PX_CHECK_LIMIT_coll='abc'" in out, out)
    print('test_gpu_check: %s' % ('PASS' if not fails else '%d FAILED' % fails))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
