"""pxpctl: drives the daemons through the pctl binary, with the same methods
and dict shapes as pxcluster.Grpc (snake_case keys, states "RUNNING" ...).
Every call runs `pctl --server ADDR <command> ... --json`; a non-zero exit
raises ClientError carrying what pctl printed, which is what a user sees."""
import json
import os
import subprocess

import pxcluster as pc


class Pctl:
    def __init__(self, exe, daemon, proto=None, server=None):
        self.exe = exe
        self.server = server or daemon.control

    def run(self, *args, timeout=30):
        argv = [self.exe, "--server", self.server] + [str(a) for a in args]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        out = r.stdout.decode(errors="replace")
        err = r.stderr.decode(errors="replace")
        if r.returncode != 0:
            raise pc.ClientError("pctl %s: exit %d: %s%s" % (args[0], r.returncode, err, out))
        return out

    def json(self, *args):
        return _normalise(json.loads(self.run(*args, "--json")))

    def submit(self, data, dp, batch, steps, layers=2, heads=2, dim=32, seq=32, lr=1e-3,
               name="", seed=1337):
        args = ["submit", "--data", data, "--dp", dp, "--batch", batch, "--steps", steps,
                "--layers", layers, "--heads", heads, "--dim", dim, "--seq", seq, "--lr", lr,
                "--seed", seed]
        if name:
            args += ["--name", name]
        return self.json(*args)["job_id"]

    def job(self, job_id):
        return self.json("status", job_id)

    def jobs(self):
        return self.json("list")

    def cancel(self, job_id):
        return self.json("cancel", job_id)

    def metrics(self, job_id):
        return self.json("metrics", job_id)

    def nodes(self):
        return self.json("nodes")

    def logs(self, job_id, rank):
        return self.run("logs", job_id, "--rank", rank)


def pctl_cluster(args, tag, env=None, daemon_args=(), tokens=20000):
    """The setup of a pctl test on two local daemons: a pxcluster.Cluster of
    2 daemons with 2 devices each (not started; `daemon_args` added to every
    daemon's command line, `env` to its environment), a token file of
    `tokens` tokens of real text in the cluster's workdir, and a client
    factory (daemon -> Pctl).  Returns (cluster, data path, factory), or None
    after printing SKIP when parallax-rank or pctl is not built (the test
    then exits 77)."""
    for exe in (args.rank, args.pctl):
        if not exe or not os.access(exe, os.X_OK):
            print("SKIP: %s not built" % (exe or "pctl/parallax-rank"))
            return None
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag=tag, env=env)
    for d in cl.daemons:
        d.extra += list(daemon_args)
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=tokens)
    return cl, data, lambda d: Pctl(args.pctl, d)


def pctl_fail(c, what, args, needles, code=1):
    """Runs pctl (a Pctl `c`) with args and asserts what a user must see for
    bad input: exit status `code` (1: refused by the daemon, 2: by pctl
    itself) and every string of `needles` (the bad value, named) in stderr;
    prints the message."""
    r = subprocess.run([c.exe, "--server", c.server] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == code, "%s: exit %d (want %d): %s" % (what, r.returncode, code, err)
    for n in needles:
        assert n in err, "%s: message %r does not name %r" % (what, err, n)
    print("rejected %-28s exit %d: %s" % (what + ":", r.returncode, err.strip()))


def _normalise(d):
    """A job's state ("running") as "RUNNING"; rank states stay as they are."""
    if isinstance(d, dict):
        out = {k: _normalise(v) for k, v in d.items()}
        if "id" in out and isinstance(out.get("state"), str):
            out["state"] = out["state"].upper()
        return out
    if isinstance(d, list):
        return [_normalise(x) for x in d]
    return d
