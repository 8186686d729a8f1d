#!/usr/bin/python3
"""test_readme.py: README.md's commands, as a newcomer runs them, so the
README cannot drift from the code.

Reads README.md's indented code blocks, joins continued lines, and sorts
every command into one of three kinds (a command that fits none fails the
test: a new command joins RUN or SKIP below, deliberately):

* run: started as written, in the README's order, in a scratch directory
  whose build/ and tests/ are links to the build and source trees, with
  only what a second run on the same machine must change: the ports
  (7070-7073, 29500) become free ones (tests/pxport.py), /tmp paths move
  into the scratch directory, node names get a per-run suffix, and training
  jobs run 4 steps (checkpoints every 2, so step_100 is step_2). The two
  daemons start from the README's lines; `data/corpus.txt` is real English
  text (/usr/share/common-licenses) standing in for the quickstart's
  corpus; every job must end COMPLETED, `cancel` must cancel a running job,
  `pctl node drain/resume` must show the node DRAINED (or DRAINING) / UP in
  `pctl nodes`, `pctl node stop NODE` must make that daemon exit 0 within
  30 s, `kill %N...` is SIGTERM to those daemons, which must exit 0 within
  30 s; once every daemon is down no rank of theirs may be left. Each must exit 0; a few outputs are
  checked for the values the README quotes.
* skip: benchmarks, the deploy and fuzz scripts, GPU and Slurm commands,
  config snippets: not run here (minutes each, or other hardware).
* Every command, run or skipped, and every script path the README names in
  its prose must exist: repository scripts tracked executable (mode
  100755) and Python ones starting `#!/usr/bin/python3` (the interpreter
  with python3-torch and the project's packages), build/ paths built.

usage: test_readme.py SOURCE_ROOT BUILD_ROOT     (suite integration)"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

# Commands run (regex on the joined command line, after any VAR=value words).
RUN = [
    r'build/daemon/parallaxd .*&$',
    r'build/client/pctl (nodes|node|list|status|metrics|logs|cancel|submit|plan|mem|bench|sample)\b',
    r'build/client/pctl data prepare\b',
    r'cp data/corpus\.txt book\.txt',
    r'job=',
    r'build/rank/parallax-rank \$job',
    r'build/rank/parallax-rank .*--print-schedule',
    r'mpirun .*build/rank/parallax-rank',
    r'build/transport/tools/px-coll-bench ',
    r'build/tests/bench/px-sgemm-bench ',
    r'kill( %\d)+( |$)',
]
# Commands not run here, and why.
SKIP = [
    (r'deploy/', 'sets up the machine or runs every suite (minutes)'),
    (r'fuzz/run\.sh', 'builds build-fuzz/ with clang and fuzzes for minutes'),
    (r'tests/bench/|tests/engine/bench_', 'a benchmark (minutes, wants an idle machine)'),
    (r'srun ', 'needs Slurm'),
    (r'build/rank/parallax-rank --device cuda', 'needs a GPU'),
    (r'build/daemon/parallaxd --devices cuda|build/client/pctl submit --devices cuda',
     'needs a GPU (integration-gpushare shares a simulated device the same way)'),
    (r'gpu-bundle/gpu-check\.sh', 'needs a GPU (the folder deploy/gpu-bundle.sh packs)'),
    (r'scrape_configs:|- job_name:|honor_labels:|static_configs:', 'Prometheus configuration'),
    (r'tensorboard --logdir', 'a web server (integration-tensorboard reads the event files with '
     'TensorBoard\'s EventAccumulator)'),
    (r'build/client/pctl (data prepare .*--tokenizer|submit --data book-bpe\.bin)',
     'needs a Hugging Face tokenizer.json, not fetched here (planner_tokenizer_hf trains one and '
     'runs data prepare --tokenizer; integration-bpe submits its tokens)'),
]
JOB_STEPS = 4
SCRIPT_RE = re.compile(r'(?<![\w/.-])((?:tests|deploy|fuzz|systemd)/[\w./-]+\.(?:py|sh))\b')


def readme_commands(text):
    """[(line number, command)] of README.md's indented code blocks, with
    continued lines joined and comment-only lines dropped."""
    out, lines = [], text.split('\n')
    i = 0
    while i < len(lines):
        if lines[i].startswith('    ') and (i == 0 or not lines[i - 1].strip()):
            start, cur = None, ''
            while i < len(lines) and (lines[i].startswith('    ') or not lines[i].strip()):
                ln = lines[i].strip()
                i += 1
                if not ln or (ln.startswith('#') and not cur):
                    continue
                if start is None:
                    start = i
                if ln.endswith('\\'):
                    cur += ln[:-1].rstrip() + ' '
                    continue
                out.append((start, cur + ln))
                start, cur = None, ''
        else:
            i += 1
    return out


def strip_env(cmd):
    """The command without leading VAR=value words and its trailing comment."""
    words = cmd.split('#', 1)[0].split() if ' #' in cmd else cmd.split()
    while words and re.match(r'^[A-Z_][A-Z0-9_]*=\S*$', words[0]):
        words.pop(0)
    return ' '.join(words)


def classify(cmd):
    bare = strip_env(cmd)
    for pat, why in SKIP:
        if re.match(pat, bare):
            return 'skip', why
    for pat in RUN:
        if re.match(pat, bare):
            return 'run', None
    return None, None


class Checker:
    def __init__(self, src, build):
        self.src, self.build = src, build
        self.fails = []
        self.modes = {}
        if os.path.exists(os.path.join(src, '.git')):
            out = subprocess.run(['git', '-C', src, 'ls-files', '-s'], capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                meta, path = line.split('\t', 1)
                self.modes[path] = meta.split()[0]

    def fail(self, msg):
        print('FAIL: ' + msg, flush=True)
        self.fails.append(msg)

    def check_path(self, path, where):
        """A repository script: tracked executable, /usr/bin/python3 if Python;
        a build/ path: built and executable."""
        if path.startswith('build/'):
            p = os.path.join(self.build, path[len('build/'):])
            if not os.access(p, os.X_OK):
                self.fail('%s: %s is not built' % (where, path))
            return
        p = os.path.join(self.src, path)
        if not os.path.isfile(p):
            self.fail('%s: %s is not in the repository' % (where, path))
            return
        if self.modes and self.modes.get(path) != '100755':
            self.fail('%s: %s is mode %s in git, not 100755 (git update-index --chmod=+x)'
                      % (where, path, self.modes.get(path, 'untracked')))
        if path.endswith('.py'):
            with open(p) as f:
                first = f.readline().rstrip()
            if first != '#!/usr/bin/python3':
                self.fail('%s: %s starts %r, not #!/usr/bin/python3 (the python with torch)'
                          % (where, path, first))


class Walk:
    """The scratch directory, the substitutions and the README's cluster."""

    def __init__(self, src, build, chk):
        self.src, self.build, self.chk = src, build, chk
        self.work = tempfile.mkdtemp(prefix='px-readme.')
        for name, target in (('build', build), ('tests', os.path.join(src, 'tests'))):
            os.symlink(target, os.path.join(self.work, name))
        os.makedirs(os.path.join(self.work, 'data'))
        self.suffix = 'rdm%d' % (os.getpid() % 100000)
        self.daemons = []
        self.names = {}  # node name (as substituted) -> its daemon's Popen
        self.jobs = []
        self.pick_ports()
        self.env = dict(os.environ, PX_SERVER='127.0.0.1:%d' % self.ports[7070],
                        PYTHONDONTWRITEBYTECODE='1')
        for k in ('PX_RUNTIME_DIR', 'PX_RANK', 'PX_WORLD_SIZE', 'PX_MASTER_ADDR',
                  'PX_MASTER_PORT', 'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'):
            self.env.pop(k, None)
        self.write_corpus()

    def pick_ports(self):
        self.ports = {p: free_port() for p in (7070, 7071, 7072, 7073, 29500)}

    def write_corpus(self):
        text = b''
        lic = '/usr/share/common-licenses'
        for name in sorted(os.listdir(lic)):
            p = os.path.join(lic, name)
            if os.path.isfile(p):
                with open(p, 'rb') as f:
                    text += f.read()
        with open(os.path.join(self.work, 'data', 'corpus.txt'), 'wb') as f:
            f.write(text[:400000])

    def subst(self, cmd):
        for old, new in self.ports.items():
            cmd = re.sub(r'(?<![\d.])%d(?!\d)' % old, str(new), cmd)
        cmd = re.sub(r'/tmp/(px[ab]|ck|w\.safetensors|gpt2-hf)\b',
                     lambda m: os.path.join(self.work, m.group(1)), cmd)
        cmd = re.sub(r'\bnode-([ab])\b', r'node-\1-' + self.suffix, cmd)
        if re.match(r'build/client/pctl submit\b', cmd):
            cmd = re.sub(r' --steps \d+', '', cmd.split(' #', 1)[0].rstrip())
            cmd += ' --steps %d' % JOB_STEPS
            cmd = cmd.replace('--checkpoint-every 100', '--checkpoint-every 2')
        cmd = cmd.replace('step_100', 'step_2')
        cmd = cmd.replace('--max-bytes 64M', '--max-bytes 1M').replace('-e 64M', '-e 1M')
        cmd = cmd.replace('[--log]', '--log')
        return cmd

    def sh(self, cmd, timeout=120):
        t0 = time.time()
        try:
            p = subprocess.run(['bash', '-c', cmd], cwd=self.work, env=self.env,
                               capture_output=True, text=True, errors='replace',
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            text = [x.decode(errors='replace') if isinstance(x, bytes) else (x or '')
                    for x in (e.stdout, e.stderr)]
            return 124, text[0], text[1] + '\n(timed out)', time.time() - t0
        return p.returncode, p.stdout, p.stderr, time.time() - t0

    def pctl_json(self, *args):
        p = subprocess.run([os.path.join(self.build, 'client', 'pctl')] + list(args) + ['--json'],
                           env=self.env, capture_output=True, text=True, timeout=60)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def wait_job(self, job, states, timeout=180):
        end = time.time() + timeout
        while time.time() < end:
            j = self.pctl_json('status', job)
            if j and str(j.get('state')).upper() in states:
                return j
            time.sleep(0.5)
        return self.pctl_json('status', job)

    def start_daemon(self, cmd):
        line = self.subst(cmd).rstrip('&').strip()
        proc = subprocess.Popen(['bash', '-c', 'exec ' + line], cwd=self.work, env=self.env,
                                start_new_session=True)
        self.daemons.append(proc)
        m = re.search(r'--name (\S+)', line)
        if m:
            self.names[m.group(1)] = proc
        return proc

    def cluster_up(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if any(d.poll() is not None for d in self.daemons):
                return False
            nodes = self.pctl_json('nodes')
            if nodes and sum(1 for n in nodes if n.get('alive')) == len(self.daemons):
                return True
            time.sleep(0.3)
        return False

    def our_ranks(self):
        pids = []
        for d in os.listdir('/proc'):
            if not d.isdigit():
                continue
            try:
                with open('/proc/%s/cmdline' % d, 'rb') as f:
                    argv = f.read().split(b'\0')
            except OSError:
                continue
            if argv and argv[0].endswith(b'parallax-rank') and \
                    any(self.suffix.encode() in a for a in argv):
                pids.append(int(d))
        return pids

    def stop(self, which=None):
        """SIGTERM to the daemons `which` (default: all), then waits; True
        when each exited 0 within 30 s."""
        which = self.daemons if which is None else which
        for d in which:
            if d.poll() is None:
                d.send_signal(signal.SIGTERM)
        ok = True
        for d in which:
            try:
                ok = d.wait(timeout=30) == 0 and ok
            except subprocess.TimeoutExpired:
                ok = False
                d.kill()
                d.wait()
        return ok

    def node_state(self, name):
        """`pctl nodes`' state of node `name`, or None."""
        for n in self.pctl_json('nodes') or []:
            if n.get('name') == name:
                return n.get('state')
        return None

    def logs(self):
        out = ''
        for n in ('pxa.log', 'pxb.log'):
            p = os.path.join(self.work, n)
            if os.path.exists(p):
                out += '--- %s\n%s' % (n, open(p, errors='replace').read()[-3000:])
        return out


def run_command(w, chk, ln, cmd, block):
    """Runs one README command (line ln); returns a short result string."""
    where = 'README.md:%d' % ln
    bare = strip_env(cmd)
    if bare.startswith('build/daemon/parallaxd'):
        w.start_daemon(cmd)
        return 'started'
    if bare.startswith('kill %'):  # bash's job numbers: the daemons in the order started
        which = [w.daemons[int(n) - 1] for n in re.findall(r'%(\d+)', bare.split('#')[0])]
        ok = w.stop(which)
        left = w.our_ranks() if all(d.poll() is not None for d in w.daemons) else []
        if not ok:
            chk.fail('%s: a daemon did not exit 0 within 30 s of SIGTERM' % where)
        if left:
            chk.fail('%s: ranks left running after the daemons stopped: %s' % (where, left))
        return 'daemons stopped' if ok and not left else 'FAILED'
    if bare.startswith('job='):
        return 'defined'
    if 'build/rank/parallax-rank $job' in bare and 'mpirun' not in bare:
        if 'PX_RANK=0' not in cmd:
            return 'run with the block'
        # the standalone block: both ranks in one shell, as the README's two lines
        script = '\n'.join(w.subst(c) for _, c in block) + '\nwait\n'
        rc, out, err, dt = w.sh(script)
        steps = re.findall(r'^step (\d+) loss', out, re.M)
        # rank 0 alone prints the step lines: 10, not one set per rank
        if rc or steps != [str(i) for i in range(1, 11)]:
            chk.fail('%s: standalone ranks: rc %d, step lines %s\n%s' % (where, rc, steps,
                                                                        err[-1500:]))
        return 'rc %d, %.0f s' % (rc, dt)
    if bare.startswith('mpirun'):
        if not shutil.which('mpirun'):
            return 'skipped: no mpirun'
        job = next(c for _, c in w.standalone if c.startswith('job='))
        line = w.subst(cmd)
        if os.geteuid() == 0:  # as the README says: root also needs --allow-run-as-root
            line = line.replace('mpirun ', 'mpirun --allow-run-as-root ', 1)
        rc, out, err, dt = w.sh(job + '\n' + line, timeout=180)
        metrics = [os.path.join(w.work, 'm%d.jsonl' % r) for r in range(4)]
        counts = [sum(1 for _ in open(m)) if os.path.exists(m) else 0 for m in metrics]
        steps = re.findall(r'^step (\d+) loss', out, re.M)
        if rc or counts != [10] * 4 or len(steps) != 10:
            chk.fail('%s: mpirun: rc %d, metrics lines per rank %s, %d step lines printed (want '
                     '10: rank 0 alone)\n%s' % (where, rc, counts, len(steps), (out + err)[-1500:]))
        return 'rc %d, %.0f s' % (rc, dt)

    line = w.subst(cmd)
    m = re.search(r'build/client/pctl (\w+)', bare)
    sub = m.group(1) if m else None
    if sub in ('status', 'metrics', 'logs', 'mem', 'sample') and 'JOB' in line:
        done = [j for j in w.jobs if j]
        if 'JOB2' in line:  # the two latest jobs (the first twice before there are two)
            line = line.replace('JOB1', done[-2 if len(done) > 1 else -1])
            line = line.replace('JOB2', done[-1])
        line = re.sub(r'\bJOB\b', done[-1], line)
    if sub == 'cancel':
        # a job to cancel: the demo's, long enough to be running
        rc, out, err, _ = w.sh('build/client/pctl submit --layers 2 --heads 2 --dim 32 --seq 32 '
                               '--dp 2 --batch 4 --steps 100000 --data book.bin')
        victim = out.split()[0] if rc == 0 and out.split() else None
        if not victim or not w.wait_job(victim, ('RUNNING',), 60):
            chk.fail('%s: no running job to cancel: %s' % (where, err[-500:]))
            return 'FAILED'
        line = re.sub(r'\bJOB\b', victim, line)
    t0 = time.time()
    rc, out, err, dt = w.sh(line, timeout=240)
    res = 'rc %d, %.1f s' % (rc, dt)
    if rc != 0:
        chk.fail('%s: `%s` exited %d\n%s%s' % (where, line, rc, out[-1500:], err[-1500:]))
        return res
    if sub == 'submit':
        job = out.split()[0]
        w.jobs.append(job)
        j = w.wait_job(job, ('COMPLETED', 'FAILED', 'CANCELLED'))
        res = 'rc %d, %.1f s to the end' % (rc, time.time() - t0)
        state = j and str(j.get('state')).upper()
        if state != 'COMPLETED' or j.get('step') != JOB_STEPS:
            chk.fail('%s: job %s ended %s at step %s (%s)' % (where, job, state,
                                                            j and j.get('step'),
                                                            j and j.get('reason')))
        res += ', %s %s' % (job, state)
    elif sub == 'cancel':
        j = w.wait_job(victim, ('CANCELLED',), 30)
        if not j or str(j.get('state')).upper() != 'CANCELLED':
            chk.fail('%s: the cancelled job is %s' % (where, j and j.get('state')))
    elif sub == 'sample' and not out.endswith('\n'):
        chk.fail('%s: pctl sample printed no text ending in a newline: %r' % (where, out[-300:]))
    elif sub == 'node':
        verb, name = line.split()[2:4]
        if verb == 'stop':
            proc = w.names.get(name)
            try:
                code = proc.wait(timeout=30) if proc else None
            except subprocess.TimeoutExpired:
                code = 'still running'
            if code != 0 or 'STOPPING' not in out:
                chk.fail('%s: pctl node stop %s printed %r; the daemon: exit %s (want 0 within '
                         '30 s)' % (where, name, out.strip(), code))
        else:
            state = w.node_state(name)
            want = ('DRAINED', 'DRAINING') if verb == 'drain' else ('UP',)
            if state not in want:
                chk.fail('%s: after pctl node %s %s, pctl nodes shows it %s' % (where, verb, name,
                                                                             state))
    elif sub == 'nodes':
        alive = sum(1 for n in (w.pctl_json('nodes') or []) if n.get('alive'))
        if alive != 2:
            chk.fail('%s: pctl nodes: %d nodes alive, the README says two' % (where, alive))
    elif sub == 'plan' and '--params 7.5e9 --dp 64' in line:
        quoted = re.search(r'# ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) GB', cmd).groups()
        missing = [q for q in quoted if q not in out]
        if missing:
            chk.fail('%s: pctl plan prints none of %s GB that the README quotes:\n%s'
                     % (where, missing, out[-1500:]))
    elif '--print-schedule' in line:
        if 'check: ok' not in out or not out.startswith('schedule zb1'):
            chk.fail('%s: --print-schedule printed:\n%s%s' % (where, err[-800:], out[-800:]))
        if err.strip():  # a schedule is data: no BLAS core, no log line
            chk.fail('%s: --print-schedule also logs %r' % (where, err.split('\n')[0]))
    return res


def on_term(signum, frame):
    raise SystemExit('stopped by signal %d' % signum)  # runs the finally: daemons stopped


def main():
    signal.signal(signal.SIGTERM, on_term)
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    chk = Checker(src, build)
    readme = open(os.path.join(src, 'README.md')).read()
    cmds = readme_commands(readme)

    # every script the prose names exists, executable, with the right python
    for path in sorted(set(SCRIPT_RE.findall(readme))):
        chk.check_path(path, 'README.md')
    plan = []
    for ln, cmd in cmds:
        kind, why = classify(cmd)
        if kind is None:
            chk.fail('README.md:%d: `%s` is neither run nor skipped by this test: add it to '
                     'RUN or SKIP' % (ln, cmd))
            continue
        for word in strip_env(cmd).split()[:1]:
            if re.match(r'(build|tests|deploy|fuzz)/', word):
                chk.check_path(word, 'README.md:%d' % ln)
        plan.append((ln, cmd, kind, why))

    # parallax-rank --help opens with its usage, not with a log line
    p = subprocess.run([os.path.join(build, 'rank', 'parallax-rank'), '--help'],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0 or not p.stdout.startswith('usage:') or p.stderr.strip():
        chk.fail('parallax-rank --help: rc %d, stdout starts %r, stderr %r'
                 % (p.returncode, p.stdout[:40], p.stderr[:200]))

    w = Walk(src, build, chk)
    w.standalone = [(ln, c) for ln, c in cmds if c.startswith('job=') or 'PX_RANK=' in c]
    t_all = time.time()
    try:
        for ln, cmd, kind, why in plan:
            if chk.fails and any('daemon' in f for f in chk.fails):
                break
            if kind == 'skip':
                print('README.md:%-4d skip  %s  (%s)' % (ln, cmd[:70], why))
                continue
            res = run_command(w, chk, ln, cmd, w.standalone)
            print('README.md:%-4d run   %s  -> %s' % (ln, cmd[:70], res), flush=True)
            if strip_env(cmd).startswith('build/daemon/parallaxd') and len(w.daemons) == 2:
                if not w.cluster_up():
                    chk.fail('the README\'s two daemons did not form a cluster:\n' + w.logs())
    finally:
        w.stop()
        if not chk.fails:
            shutil.rmtree(w.work, ignore_errors=True)
        else:
            print('scratch directory kept: %s' % w.work)
    print('%d commands (%d run), %.0f s: %s' % (len(plan), sum(1 for p in plan if p[2] == 'run'),
                                                time.time() - t_all,
                                                'FAIL (%d)' % len(chk.fails) if chk.fails else 'ok'))
    return 1 if chk.fails else 0


if __name__ == '__main__':
    sys.exit(main())
