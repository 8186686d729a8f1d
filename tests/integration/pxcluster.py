"""pxcluster: start real parallaxd daemons on loopback for integration tests.

Used by test_*.py in this folder (run with /usr/bin/python3, which has
grpcio and protobuf). A Cluster owns N daemons with free ports, temporary
state and runtime dirs, `--devices cpu:K` each and every daemon's peer list
pointing at the others. Node names are unique per test run so the ranks of
this run can be told apart from other parallax processes on the machine
(job ids embed the node name).

Clients: `Pctl` (pxpctl.py) runs the pctl binary (when the build has one);
`Grpc` talks to the Control service directly with stubs generated from
parallax.proto by protoc at run time. Both return plain dicts with the
proto's snake_case field names, every field present, and job states as
"PENDING", "RUNNING", "COMPLETED", ...
"""
import atexit
import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pxport import ephemeral_range, free_port  # noqa: E402,F401 (tests use pc.free_port and pc.ephemeral_range)

HERE = os.path.dirname(os.path.abspath(__file__))


def write_llmc_tokens(path, max_tokens=150000):
    """Writes an llm.c-layout token file (256 x int32 header: magic 20240520,
    version 1, count; then uint16 byte tokens) of real English text from
    /usr/share/common-licenses. Returns the token count."""
    text = b""
    lic = "/usr/share/common-licenses"
    for name in sorted(os.listdir(lic)):
        p = os.path.join(lic, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                text += f.read()
        if len(text) >= max_tokens:
            break
    text = text[:max_tokens]
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(text)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(text), *text))
    return len(text)


def sleeper_rank(workdir):
    """A stand-in for parallax-rank that sleeps an hour (a job's ranks
    held RUNNING, for tests of the daemons alone): its path, for
    PX_RANK_BIN."""
    path = os.path.join(workdir, "sleeper.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec sleep 3600\n")
    os.chmod(path, 0o700)
    return path


def live_procs():
    """(pid, argv as a list of bytes) of every live (not zombie) process, read
    from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if st != "Z":
            out.append((int(d), argv))
    return out


def procs_with_arg(marker):
    """PIDs of live processes with `marker` as one of their arguments."""
    return [pid for pid, argv in live_procs() if marker.encode() in argv]


def rank_pids(job_id):
    """PIDs of parallax-rank processes of `job_id` (read from /proc)."""
    pids = []
    for pid, argv in live_procs():
        if argv and argv[0].endswith(b"parallax-rank") and b"--job" in argv:
            i = argv.index(b"--job")
            if i + 1 < len(argv) and argv[i + 1] == job_id.encode():
                pids.append(pid)
    return pids


def wait_for(pred, timeout, what, interval=0.2):
    end = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() > end:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_all_alive(daemons, client, timeout, what, port_retry=False):
    """Waits (wait_for, `timeout` s, `what` in its message) until `client`
    lists every one of `daemons` alive. A daemon that exits first is an
    AssertionError with its log - unless `port_retry` and its log since its
    start says "cannot listen" (another process took its port after
    free_port()): then returns that daemon's name, for the caller to start
    again on new ports. Returns None once all are up."""
    want = len(daemons)
    taken = []

    def ready():
        for d in daemons:
            if not d.alive():
                if port_retry and "cannot listen" in d.log_since_start():
                    taken.append(d.name)
                    return True
                raise AssertionError("daemon %s exited at start:\n%s" % (d.name, d.log_tail()))
        try:
            nodes = client.nodes()
        except Exception:
            return False
        return sum(1 for n in nodes if n.get("alive")) == want
    wait_for(ready, timeout, what)
    return taken[0] if taken else None


CGROUP_LINE = "ranks are tracked by cgroup v2 under "


def cgroup_bases(log):
    """The cgroup bases a daemon log names (cgroup.c's start-up line), in
    order."""
    return [l.split(CGROUP_LINE, 1)[1].strip() for l in log.splitlines() if CGROUP_LINE in l]


def remove_cgroup(path, timeout=5.0):
    """Kills every process in cgroup `path` and its children (cgroup.kill,
    else SIGKILL to each pid), waits until each is empty, removes them
    deepest first. Returns the paths that existed; an AssertionError names
    one that could not be removed."""
    found = []
    try:
        children = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return found
    for child in children:
        found += remove_cgroup(child, timeout)
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        except OSError:
            pass
    end = time.time() + timeout
    while True:
        try:
            os.rmdir(path)
            break
        except FileNotFoundError:
            break
        except OSError as e:
            if time.time() > end:
                raise AssertionError("cannot remove cgroup %s: %s" % (path, e))
            time.sleep(0.05)
    return found + [path]


_DAEMONS = []  # every Daemon of this process, for _reap_at_exit


def _reap_at_exit():
    """At interpreter exit: the cgroups of daemons that are down but were
    never stop()ped (a test that ended early) go too."""
    for d in _DAEMONS:
        try:
            left = d.reap_cgroups()
        except AssertionError as e:
            sys.stderr.write("pxcluster: %s\n" % e)
            continue
        if left:
            sys.stderr.write("pxcluster: at exit, removed cgroup(s) %s left by %s\n"
                             % (", ".join(left), d.name))


atexit.register(_reap_at_exit)


class Daemon:
    def __init__(self, exe, name, workdir, devices, env):
        _DAEMONS.append(self)
        self.exe, self.name, self.env = exe, name, env
        self.devices = devices
        self.control = "127.0.0.1:%d" % free_port()
        self.peer = "127.0.0.1:%d" % free_port()
        self.state_dir = os.path.join(workdir, name, "state")
        self.runtime_dir = os.path.join(workdir, name, "run")
        self.log_path = os.path.join(workdir, name + ".log")
        self.peers = []
        self.extra = []  # more parallaxd flags (--token-file F ...)
        self.proc = None

    def argv(self):
        a = [self.exe, "--name", self.name, "--listen", self.control, "--peer-listen", self.peer,
             "--state-dir", self.state_dir, "--runtime-dir", self.runtime_dir,
             "--devices", "cpu:%d" % self.devices, "--config", "/dev/null"]
        if self.peers:
            a += ["--peers", ",".join(self.peers)]
        return a + list(self.extra)

    def run_once(self, timeout=30):
        """Runs this daemon in the foreground until it exits (a start that
        must be refused): (exit code, stdout and stderr as text)."""
        r = subprocess.run(self.argv(), env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace")

    def start(self):
        try:
            self.log_start = os.path.getsize(self.log_path)
        except OSError:
            self.log_start = 0
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env)
        log.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=20):
        """SIGTERM, then waits; returns the exit code. Then removes what is
        left of the daemon's cgroups (reap_cgroups): after a clean stop
        (exit 0) anything left is the daemon's fault, an AssertionError;
        after a crash or SIGKILL the test's leftovers simply go."""
        rc = self._stop(timeout)
        left = self.reap_cgroups()
        if left and rc == 0:
            raise AssertionError("%s stopped cleanly (exit 0) but left cgroup(s) behind: %s"
                                 % (self.name, ", ".join(left)))
        if left:
            sys.stderr.write("pxcluster: removed cgroup(s) %s left by %s (exit %s)\n"
                             % (", ".join(left), self.name, rc))
        return rc

    def _stop(self, timeout):
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("%s did not stop within %d s of SIGTERM" % (self.name, timeout))

    def cgroup_base(self):
        """The cgroup the daemon said at its last start it tracks ranks
        under, or None (process groups only, or not started)."""
        bases = cgroup_bases(self.log_since_start())
        return bases[-1] if bases else None

    def reap_cgroups(self):
        """Removes every cgroup base the daemon ever named in its log (with
        the rank cgroups in it: their processes are killed first), unless
        the daemon is still running. Returns the paths that were there."""
        if self.alive():
            return []
        try:
            with open(self.log_path, errors="replace") as f:
                bases = cgroup_bases(f.read())
        except OSError:
            return []
        left = []
        for base in sorted(set(bases)):
            if os.path.isdir(base):
                left += remove_cgroup(base)
        return left

    def log_since_start(self):
        """The daemon's log written since its last start()."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(getattr(self, "log_start", 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Cluster:
    """N daemons on loopback, each seeing the others as peers.

    A test runs its cluster as a context:

        with pc.Cluster(args.parallaxd, n=2, tag="x") as cl:
            cl.start(client_factory)
            ...

    Leaving it stops every daemon still running (stop_all) whatever
    happened; when the body passed, the workdir goes and a daemon that did
    not stop within 20 s of SIGTERM or left a cgroup behind after a clean
    exit is an AssertionError; when it failed, the daemons' log tails are
    printed, the workdir is kept for a look, and the body's exception goes
    on (sys.exit in the body counts as passing). What a test starts beside
    the cluster is undone first: on_exit."""

    def __init__(self, parallaxd, n=2, devices=2, tag="it", env=None):
        self.workdir = tempfile.mkdtemp(prefix="px-%s-" % tag)
        base = "%s%d" % (tag, os.getpid())
        e = dict(os.environ)
        e.update({"PX_HEARTBEAT_MS": "200", "PX_PEER_DEAD_MS": "3000",
                  "PX_KILL_GRACE_MS": "2000", "PX_CONNECT_TIMEOUT_MS": "30000",
                  "OPENBLAS_NUM_THREADS": "1"})
        if env:
            e.update(env)
        self.env = e
        self.daemons = [Daemon(parallaxd, "%s%c" % (base, ord("a") + i), self.workdir, devices, e)
                        for i in range(n)]
        for d in self.daemons:
            d.peers = [o.peer for o in self.daemons if o is not d]

    def repick_ports(self):
        """New control and peer ports for every daemon (and the peer lists
        that name them): after a daemon found a port taken at start."""
        for d in self.daemons:
            d.control = "127.0.0.1:%d" % free_port()
            d.peer = "127.0.0.1:%d" % free_port()
        for d in self.daemons:
            d.peers = [o.peer for o in self.daemons if o is not d]

    def start(self, client_factory, attempts=3):
        """Starts the daemons and waits until each sees all. A daemon that
        exits at start because another process took its port in the
        moment since free_port() ("cannot listen" in its log) makes every
        daemon start again on new ports, up to `attempts` times; any other
        exit at start is an AssertionError with the daemon's log."""
        for attempt in range(attempts):
            for d in self.daemons:
                d.start()
            taken = wait_all_alive(self.daemons, client_factory(self.daemons[0]), 20,
                                   "all %d daemons to see each other" % len(self.daemons),
                                   port_retry=attempt + 1 < attempts)
            if not taken:
                return
            sys.stderr.write("pxcluster: %s found its port taken at start; new ports (attempt %d)\n"
                             % (taken, attempt + 2))
            for d in self.daemons:
                d.stop()
            self.repick_ports()

    def stop(self):
        """Daemon.stop of each daemon, in order: their exit codes (None for
        one never started). The first AssertionError is raised once every
        daemon has been stopped."""
        codes, errors = self.stop_all()
        if errors:
            raise AssertionError("; ".join(errors))
        return codes

    def stop_all(self):
        """Stops every daemon (Daemon.stop); returns (exit codes, the
        AssertionError messages of the daemons that did not stop cleanly)."""
        codes, errors = [], []
        for d in self.daemons:
            try:
                codes.append(d.stop())
            except AssertionError as e:
                codes.append(d.proc.returncode if d.proc else None)
                errors.append(str(e))
        return codes, errors

    def on_exit(self, fn):
        """`fn(failed)` runs when the context is left, before the daemons
        stop (the last registered first, as nested contexts would): for
        what a test starts beside the cluster (a Prometheus, stopped
        daemons to continue, orphans to kill); `failed` says whether the
        body raised."""
        self._on_exit = getattr(self, "_on_exit", []) + [fn]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # sys.exit (a SKIP's 77, say) is no failure
        failed = exc_type is not None and not issubclass(exc_type, SystemExit)
        for fn in reversed(getattr(self, "_on_exit", [])):
            fn(failed)
        _, errors = self.stop_all()
        if failed:
            print(self.logs())
            for e in errors:
                sys.stderr.write("pxcluster: also: %s\n" % e)
            sys.stderr.write("pxcluster: kept %s\n" % self.workdir)
            return False
        if errors:
            print(self.logs())
            raise AssertionError("; ".join(errors))
        self.cleanup()
        return False

    def cleanup(self):
        """Removes the state, logs and data of a passed run (kept on failure)."""
        import shutil
        shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self):
        return "\n".join("---- %s\n%s" % (d.name, d.log_tail()) for d in self.daemons)


class ClientError(Exception):
    """A client call failed; str() is the message the user would see."""


class Grpc:
    """Control service over gRPC with stubs generated at run time."""
    _pb = None

    def __init__(self, daemon, proto, token=None, target=None):
        """token: sent as the x-parallax-token metadata of every call;
        target: another address than daemon.control."""
        import grpc  # /usr/bin/python3 has python3-grpcio
        if Grpc._pb is None:
            proto = proto or os.path.join(HERE, "..", "..", "proto", "parallax.proto")
            import atexit
            import shutil
            out = tempfile.mkdtemp(prefix="px-pb-")
            atexit.register(shutil.rmtree, out, True)
            subprocess.check_call(["protoc", "--proto_path=" + os.path.dirname(proto),
                                   "--python_out=" + out, proto])
            sys.path.insert(0, out)
            import parallax_pb2
            Grpc._pb = parallax_pb2
        self.pb = Grpc._pb
        self.grpc = grpc
        self.channel = grpc.insecure_channel(target or daemon.control)
        self.metadata = (("x-parallax-token", token),) if token else None

    @staticmethod
    def _dict(msg):
        from google.protobuf import json_format
        d = json_format.MessageToDict(msg, preserving_proto_field_name=True,
                                      including_default_value_fields=True)
        return _normalise(d)

    def _call(self, method, req, resp_cls, timeout=15):
        f = self.channel.unary_unary("/parallax.v1.Control/" + method,
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=resp_cls.FromString)
        try:
            r = f(req, timeout=timeout, metadata=self.metadata)
        except self.grpc.RpcError as e:
            raise ClientError("%s: %s" % (e.code().name, e.details()))
        return self._dict(r)

    def submit(self, data, dp, batch, steps, layers=2, heads=2, dim=32, seq=32, lr=1e-3,
               name="", seed=1337, **spec_fields):
        """spec_fields: any other JobSpec field (checkpoint_dir=..., max_restarts=...)."""
        pb = self.pb
        spec = pb.JobSpec(name=name, model=pb.ModelSpec(layers=layers, heads=heads, dim=dim,
                                                        seq=seq, vocab=256),
                          data_path=data, dp=dp, batch=batch, steps=steps, lr=lr, seed=seed,
                          weight_decay=0.1, min_lr_ratio=0.1, **spec_fields)
        return self._call("SubmitJob", pb.SubmitJobRequest(spec=spec),
                          pb.SubmitJobResponse)["job_id"]

    def job(self, job_id):
        return self._call("GetJob", self.pb.GetJobRequest(job_id=job_id), self.pb.Job)

    def jobs(self):
        return self._call("ListJobs", self.pb.ListJobsRequest(),
                          self.pb.ListJobsResponse).get("jobs", [])

    def cancel(self, job_id):
        return self._call("CancelJob", self.pb.CancelJobRequest(job_id=job_id), self.pb.Job)

    def metrics(self, job_id):
        return self._call("GetMetrics", self.pb.GetMetricsRequest(job_id=job_id),
                          self.pb.GetMetricsResponse).get("steps", [])

    def nodes(self):
        return self._call("ListNodes", self.pb.ListNodesRequest(),
                          self.pb.ListNodesResponse, timeout=3).get("nodes", [])

    def logs(self, job_id, rank):
        import base64
        r = self._call("GetLogs", self.pb.GetLogsRequest(job_id=job_id, rank=rank),
                       self.pb.GetLogsResponse)
        return base64.b64decode(r.get("text", "")).decode(errors="replace")

    def watch(self, job_id, timeout=300):
        """Yields JobEvent dicts (job, metrics) until the stream ends."""
        f = self.channel.unary_stream("/parallax.v1.Control/WatchJob",
                                      request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=self.pb.JobEvent.FromString)
        try:
            for ev in f(self.pb.WatchJobRequest(job_id=job_id), timeout=timeout,
                        metadata=self.metadata):
                d = {"job": self._dict(ev.job)}
                if ev.HasField("metrics"):
                    d["metrics"] = self._dict(ev.metrics)
                yield d
        except self.grpc.RpcError as e:
            raise ClientError("%s: %s" % (e.code().name, e.details()))


def _normalise(d):
    """Job states as "RUNNING" (not "JOB_RUNNING"), recursively."""
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            if k == "state" and isinstance(v, str) and v.startswith("JOB_"):
                v = v[4:]
            out[k] = _normalise(v)
        return out
    if isinstance(d, list):
        return [_normalise(x) for x in d]
    return d


def job_state(job):
    return job.get("state", "UNSPECIFIED")


def wait_state(client, job_id, states, timeout, what=None):
    def check():
        j = client.job(job_id)
        return j if job_state(j) in states else None
    return wait_for(check, timeout, what or "job %s to reach %s" % (job_id, "/".join(states)),
                    interval=0.5)


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def rank_missing(args):
    """True, after printing meson's SKIP line, when --rank names no
    executable parallax-rank (the test then returns 77)."""
    if not args.rank or not os.access(args.rank, os.X_OK):
        print("SKIP: parallax-rank not built (%s)" % args.rank)
        return True
    return False


def parse_args(argv):
    """--parallaxd PATH --proto PATH [--pctl PATH] [--rank PATH]"""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallaxd", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--pctl", default="")
    ap.add_argument("--rank", default="")
    return ap.parse_args(argv)
