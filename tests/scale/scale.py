#!/usr/bin/python3
"""Control-plane scale figures: N parallaxd daemons on this host.

For each N (--sizes), N daemons start (unique names, own state dirs,
--devices cpu:1, Prometheus metrics on loopback), every one but the seed
(daemon 0) listing only the seed in --peers. Measured, in this order:
  converge   seconds from the start of the N-1 non-seeds until every
             daemon counts all N alive, and that less the time until the
             last daemon listened (on a loaded 2-core host, starting 128
             processes takes many seconds);
  probes/s   membership calls per second, all daemons together: SWIM's
             pings (Peer.Heartbeat) and indirect probes
             (Peer.IndirectProbe), the sum of parallax_rpc_requests_total
             over --window seconds of idling; and that over N per
             protocol period (--heartbeat-ms): 1.0 is one probe per daemon
             a period, the issue's bound is 2;
  cpu        CPU of all daemons together and per daemon (mean), in % of
             one core, from utime+stime in /proc/PID/stat over the same
             window;
  fds        open fds per daemon (mean and max, /proc/PID/fd; one of them
             is the metrics listener);
  job        a dp=N job (N <= --max-dp) submitted through the last daemon
             (a leaf that listed only the seed): its created -> RUNNING
             time (Job.started_ms - created_ms), then cancelled;
  detect     after SIGKILL of daemon 1, seconds until each other daemon
             counts it dead (max and median over the members);
  rejoin     after an outage of --outage seconds from the kill, daemon 1
             restarts with its state dir: seconds until every daemon counts
             it alive again (max).
Each of the three is read two ways: from every daemon's log, the moment its
own view changed ("peer X ... is alive with", "is dead", "restarted": the
figure printed first), and by polling every
daemon's ListNodes in turn until it shows the change ("sweep": a figure
that includes up to one sweep of N-1 calls from this script). The two must
agree: the run fails when a daemon's ListNodes never shows the change or
its log never says it, and --check bounds both.
With --check (the integration suite's small run) the bounds are asserted:
convergence <= 5 s, detection at every member <= peer-dead-ms + 3 s,
rejoin <= 3 s, the job RUNNING (or, without --rank, placed)."""
import argparse
import datetime
import os
import re
import signal
import socket
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import pxcluster as pc  # noqa: E402

HB = re.compile(r'^parallax_rpc_requests_total\{[^}]*service="Peer"[^}]*'
                r'method="(?:Heartbeat|IndirectProbe)"[^}]*\}\s+([0-9.e+]+)', re.M)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def heartbeats(d):
    with urllib.request.urlopen("http://%s/metrics" % d.metrics, timeout=10) as r:
        return sum(float(x) for x in HB.findall(r.read().decode()))


def alive_view(cli, timeout=5):
    try:
        return {n["name"]: bool(n.get("alive")) for n in cli._call(
            "ListNodes", cli.pb.ListNodesRequest(), cli.pb.ListNodesResponse,
            timeout=timeout).get("nodes", [])}
    except pc.ClientError:
        return None


def listening(d):
    """Whether d is up: alive, its log saying it is ready and its control
    port accepting (a port it found taken may accept for another process).
    A daemon that found one of its ports taken at start (another process
    took it after free_port(): with 64 daemons' outgoing connections, it
    happens) is started again on new ports, up to 3 times; any other exit
    is an AssertionError."""
    host, port = d.control.rsplit(":", 1)
    if d.alive():
        if "ready:" not in d.log_since_start():
            return False
        try:
            socket.create_connection((host, int(port)), 1).close()
            return True
        except OSError:
            return False
    if "cannot listen" not in d.log_since_start() or d.retries >= 3:
        raise AssertionError("%s exited at start:\n%s" % (d.name, d.log_tail()))
    d.retries += 1
    sys.stderr.write("%s found a port taken; started again on new ports\n" % d.name)
    d.control = "127.0.0.1:%d" % pc.free_port()
    d.peer = "127.0.0.1:%d" % pc.free_port()
    d.metrics = "127.0.0.1:%d" % pc.free_port()
    d.extra = ["--metrics-listen", d.metrics]
    d.start()
    return False


def sweep_until(members, pred, timeout, what, t0=None):
    """Polls each member in turn until pred(member's view) holds for it;
    returns {member name: seconds from t0 (default: now) until first seen}."""
    t0 = t0 or time.time()
    left = dict(members)  # name -> client
    seen = {}
    while left:
        if time.time() - t0 > timeout:
            raise AssertionError("timed out after %.0f s waiting for %s at %s" %
                                 (timeout, what, ", ".join(sorted(left))))
        for name, cli in list(left.items()):
            v = alive_view(cli)
            if v is not None and pred(v):
                seen[name] = time.time() - t0
                del left[name]
        time.sleep(0.05)
    return seen


LOGTIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d\d\d) ")


def log_offsets(ds):
    """Each daemon's log size now: where to read its news from."""
    return {d.name: (os.path.getsize(d.log_path) if os.path.exists(d.log_path) else 0)
            for d in ds}


def log_seconds(line, t0):
    """The time of a log line (parallaxd writes local HH:MM:SS.mmm) in
    seconds after t0 (time.time()), or None when the line has none."""
    m = LOGTIME.match(line)
    if not m:
        return None
    ref = datetime.datetime.fromtimestamp(t0)
    at = ref.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)),
                     microsecond=int(m.group(4)) * 1000)
    dt = (at - ref).total_seconds()
    if dt < -43200:  # past midnight
        dt += 86400
    return dt


def log_lines(d, offset, rx, t0):
    """(match, seconds after t0) for each line of d's log from byte offset
    on that rx matches and that carries a time."""
    with open(d.log_path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            m = rx.search(line)
            t = log_seconds(line, t0) if m else None
            if t is not None:
                yield m, t


def logged(ds, offsets, pattern, t0):
    """{daemon name: seconds after t0 of the first line of its log since
    offsets that matches pattern} for every daemon whose log has one: the
    moment the member's own view changed, where a ListNodes sweep of 127
    members also counts the time the sweep took to reach it."""
    rx = re.compile(pattern)
    out = {}
    for d in ds:
        for _, t in log_lines(d, offsets.get(d.name, 0), rx, t0):
            out[d.name] = t
            break
    return out


def converged_logged(ds, t0):
    """For each daemon, seconds after t0 until its log had said every
    other daemon is alive (its first "is alive" line for each)."""
    rx = re.compile(r"peer (\S+) \(.*\) is alive with")
    out = {}
    slowest = []
    for d in ds:
        first = {}
        for m, t in log_lines(d, 0, rx, t0):
            first.setdefault(m.group(1), t)
        others = [x.name for x in ds if x is not d]
        if all(x in first for x in others):
            last = max(others, key=lambda x: first[x])
            out[d.name] = first[last]
            slowest.append((first[last], d.name, last))
    if slowest:
        t, who, whom = max(slowest)
        ready = logged([d for d in ds if d.name in (who, whom)], {}, r"node \S+ ready:", t0)
        sys.stderr.write("the last to converge: %s saw %s alive %.2f s after the start (they "
                         "were ready at %.2f and %.2f s)\n" % (who, whom, t, ready.get(who, -1),
                                                               ready.get(whom, -1)))
    return out


def run_size(args, n, tag):
    env = dict(os.environ)
    env.update({"PX_HEARTBEAT_MS": str(args.heartbeat_ms), "PX_PEER_DEAD_MS": str(args.dead_ms),
                "PX_CONNECT_TIMEOUT_MS": "60000", "OPENBLAS_NUM_THREADS": "1"})
    if args.rank:
        env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    import tempfile
    work = tempfile.mkdtemp(prefix="px-scale%d-" % n)
    if not args.rank:
        env["PX_RANK_BIN"] = pc.sleeper_rank(work)
    ds = [pc.Daemon(args.parallaxd, "%s%d-%03d" % (tag, n, i), work, 1, env) for i in range(n)]
    for d in ds:
        d.retries = 0
        d.metrics = "127.0.0.1:%d" % pc.free_port()
        d.extra = ["--metrics-listen", d.metrics]
        if d is not ds[0]:
            d.peers = [ds[0].peer]
    row = {"N": n}
    clients = {}
    try:
        ds[0].start()
        pc.wait_for(lambda: listening(ds[0]), 60, "the seed to listen", 0.02)
        for d in ds[1:]:  # the seed's port, as it listens now
            d.peers = [ds[0].peer]
        t0 = time.time()
        for d in ds[1:]:
            d.start()
        for d in ds:  # listening first: a gRPC channel that found no listener backs off 1 s+
            pc.wait_for(lambda: listening(d), 60, "%s to listen" % d.name, 0.02)
        row["listen"] = time.time() - t0
        clients = {d.name: pc.Grpc(d, args.proto) for d in ds}
        names = set(clients)
        conv = sweep_until(clients, lambda v: all(v.get(x) for x in names), args.converge_timeout,
                           "every daemon to list all %d alive" % n, t0)
        row["converge"] = max(conv.values())
        conv_log = converged_logged(ds, t0)
        assert len(conv_log) == n, ("a daemon's log lacks an 'is alive' line for some member",
                                    sorted(set(clients) - set(conv_log)))
        row["converge_log"] = max(conv_log.values())
        time.sleep(args.settle)
        pids = [d.proc.pid for d in ds]
        hb0 = sum(heartbeats(d) for d in ds)
        c0 = sum(cpu_ticks(p) for p in pids)
        w0 = time.time()
        time.sleep(args.window)
        c1 = sum(cpu_ticks(p) for p in pids)
        w1 = time.time()
        hb1 = sum(heartbeats(d) for d in ds)
        row["hb_s"] = (hb1 - hb0) / (w1 - w0)
        row["hb_ratio"] = row["hb_s"] / (n * 1000.0 / args.heartbeat_ms)
        row["cpu_all"] = 100.0 * (c1 - c0) / TICK / (w1 - w0)
        row["cpu_each"] = row["cpu_all"] / n
        fds = [len(os.listdir("/proc/%d/fd" % p)) for p in pids]
        row["fds"] = (statistics.mean(fds), max(fds))

        if n <= args.max_dp:
            data = os.path.join(work, "licenses.bin")
            pc.write_llmc_tokens(data, max_tokens=20000)
            leaf = clients[ds[-1].name]
            job = leaf.submit(data, dp=n, batch=n, steps=100000, layers=1, heads=2, dim=16,
                              seq=16, name="scale%d" % n)
            want = ("RUNNING",) if args.rank else ("STARTING", "RUNNING")
            j = pc.wait_state(leaf, job, want, 120)
            if args.rank:
                row["job"] = (int(j["started_ms"]) - int(j["created_ms"])) / 1000.0
            else:
                row["job"] = float("nan")  # no ranks: placed only
            leaf.cancel(job)
            pc.wait_state(leaf, job, ("CANCELLED", "FAILED", "COMPLETED"), 60)

        victim = ds[1]
        others = {d.name: clients[d.name] for d in ds if d is not victim}
        rest = [d for d in ds if d is not victim]
        off = log_offsets(rest)
        victim.proc.send_signal(signal.SIGKILL)
        tk = time.time()
        victim.proc.wait()
        det = sweep_until(others, lambda v: v.get(victim.name) is False,
                          args.dead_ms / 1000.0 + 60, "every member to count %s dead" % victim.name,
                          tk)
        row["detect"] = (max(det.values()), statistics.median(det.values()))
        det_log = logged(rest, off, r"peer %s \(.*\) is dead" % re.escape(victim.name), tk)
        assert len(det_log) == n - 1, ("a member's log lacks the death", sorted(
            set(others) - set(det_log)))
        row["detect_log"] = (max(det_log.values()), statistics.median(det_log.values()))
        time.sleep(max(0.0, args.outage - (time.time() - tk)))
        off = log_offsets(rest)
        victim.start()
        tr = time.time()
        row["outage"] = tr - tk
        rej = sweep_until(others, lambda v: v.get(victim.name) is True, 120,
                          "every member to count %s alive again" % victim.name, tr)
        row["rejoin"] = max(rej.values())
        rej_log = logged(rest, off, r"peer %s \(.*\) (is alive with|restarted)" %
                         re.escape(victim.name), tr)
        assert len(rej_log) == n - 1, ("a member's log lacks the rejoin", sorted(
            set(others) - set(rej_log)))
        row["rejoin_log"] = max(rej_log.values())
    finally:
        for d in ds:
            if d.alive():
                d.proc.send_signal(signal.SIGTERM)
        for d in ds:
            if d.proc:
                try:
                    d.proc.wait(30)
                except Exception:
                    d.proc.kill()
                    d.proc.wait()
            d.reap_cgroups()
    import shutil
    if args.keep:
        sys.stderr.write("kept %s\n" % work)
    else:
        shutil.rmtree(work, True)
    return row


def fmt(row):
    job = row.get("job")
    return ("| %d | %.0f (%.2f x N a period) | %.1f%% | %.2f%% | %.0f (max %d) | %.2f s "
            "(%.2f s after all listened; sweep %.2f s) | %.2f s (median %.2f; sweep %.2f) "
            "| %.2f s (sweep %.2f; outage %.0f s) | %s |" % (
                row["N"], row["hb_s"], row["hb_ratio"], row["cpu_all"], row["cpu_each"],
                row["fds"][0], row["fds"][1], row["converge_log"],
                max(0.0, row["converge_log"] - row["listen"]), row["converge"],
                row["detect_log"][0], row["detect_log"][1], row["detect"][0],
                row["rejoin_log"], row["rejoin"], row["outage"],
                "-" if job is None else ("placed" if job != job else "%.2f s" % job)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallaxd", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--rank", default="")
    ap.add_argument("--pctl", default="")
    ap.add_argument("--sizes", default="8,32,64")
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    ap.add_argument("--dead-ms", type=int, default=10000)
    ap.add_argument("--outage", type=float, default=20.0)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--max-dp", type=int, default=32)
    ap.add_argument("--converge-timeout", type=float, default=120.0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the daemons' logs and state")
    args = ap.parse_args()
    tag = "sc%d-" % os.getpid()
    print("heartbeat %d ms, peer-dead %d ms, outage %.0f s, idle window %.0f s, %d cores" % (
        args.heartbeat_ms, args.dead_ms, args.outage, args.window, os.cpu_count()))
    print("| N | probe calls/s (all daemons) | idle CPU, all daemons | per daemon | "
          "fds per daemon | convergence from one seed | detection of a SIGKILL (every member) | "
          "rejoin after the outage | dp=N job created -> RUNNING (through a leaf) |")
    print("|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        row = run_size(args, n, tag)
        rows.append(row)
        print(fmt(row))
        sys.stdout.flush()
    if args.check:
        for r in rows:
            # the members' own views (logs) and what ListNodes showed (sweep)
            for conv, det, rej in (("converge_log", "detect_log", "rejoin_log"),
                                   ("converge", "detect", "rejoin")):
                assert r[conv] <= 5.0, ("convergence", conv, r)
                assert r[det][0] <= args.dead_ms / 1000.0 + 3.0, ("detection", det, r)
                assert r[rej] <= 3.0, ("rejoin", rej, r)
            assert r["hb_ratio"] <= 2.0, ("probe calls/s over N per period", r)
        print("PASS")


if __name__ == "__main__":
    main()
