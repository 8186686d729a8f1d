#!/usr/bin/python3
"""Chaos soak: a checkpointed, restartable job on namespace hosts survives
faults injected at random and loses nothing.

Three hosts (tests/integration/pxhosts.py: network, IPC, PID and mount
namespaces each, ranks talking TCP over veths), 2 CPU devices each. A dp=4
job with --checkpoint-every and --max-restarts, its checkpoints on a small
tmpfs, runs while a driver injects, at random intervals of running time
(seeded; the seed is printed and --seed replays the schedule):

  rank-kill    SIGKILL of one of the job's parallax-rank processes
  daemon-kill  SIGKILL of one host's parallaxd (the init of its PID
               namespace, so its ranks die with it: a host crash), started
               again on the same state a few seconds later
  link-drop    every packet of one host dropped both ways for a few seconds
               (nftables, as pxhosts.loss does)
  disk-full    once: the checkpoint tmpfs filled to the last byte until the
               job has met it (a failed checkpoint) or a while has passed

The driver follows the job through its restarts (a failed job restarted
from its newest checkpoint gets a new id; its reason names it). Before the
chaos the same job runs once uninterrupted. The soak passes when:

  * the chain ends COMPLETED with all its steps;
  * the final parameters (--export-safetensors) are bitwise those of the
    uninterrupted run (resume reproduces data order and every update);
  * nothing is left behind: no parallax-rank process, no job cgroup, no
    file in any host's /dev/shm (nor a new one in this one's), no listening
    port in any host but the daemons' own (none once they stop);
  * the history is complete: every job of the chain is listed by every
    daemon (pctl list) and stored in the coordinator's SQLite with its
    events, each failed one naming its successor, the last one's metrics
    reaching the last step.

It prints each fault as it is injected and a final report: each fault, what
it cost (restarts, lost steps, seconds to progress again) and the totals.
Needs root (namespaces, tmpfs, nft); exits 77 where it cannot run.

Usage: soak.py --parallaxd P --rank R --pctl C --proto F [--seed S]
               [--faults N] [--minutes M] [--keep]"""
import argparse
import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import pxcluster as pc  # noqa: E402
import pxhosts  # noqa: E402
from pxpctl import Pctl  # noqa: E402

HB_MS, PEER_DEAD_MS, COMM_MS = 200, 3000, 8000
MODEL = dict(layers=2, heads=2, dim=32, seq=32, batch=8, lr=1e-3, seed=1337)
CKPT_EVERY = 25
TMPFS_MB = 24
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def log(msg):
    print("[%7.1f] %s" % (time.time() - T0, msg), flush=True)


T0 = time.time()


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        env = {"PX_PEER_DEAD_MS": str(PEER_DEAD_MS), "PX_HEARTBEAT_MS": str(HB_MS),
               "PX_COMM_TIMEOUT_MS": str(COMM_MS), "PX_KILL_GRACE_MS": "2000"}
        self.h = pxhosts.Hosts(args.parallaxd, n=3, devices=2, tag="sk", env=env)
        self.workdir = self.h.workdir
        self.data = os.path.join(self.workdir, "licenses.bin")
        self.ckpt = os.path.join(self.workdir, "ckpt")
        self.mounted = False
        self.faults = []      # dicts, in order
        self.problems = []    # what the faults did that they must not
        self.chain = []       # job ids, first to last
        self.filler = os.path.join(self.ckpt, "filler")
        self.shm_others = []

    # ------------------------------------------------------------ setup
    def start(self):
        h = self.h
        pc.write_llmc_tokens(self.data, max_tokens=60000)
        os.makedirs(self.ckpt)
        # before the daemons: their mount namespaces get this mount too
        pxhosts.sh("mount", "-t", "tmpfs", "-o", "size=%dm,mode=0755" % TMPFS_MB, "tmpfs",
                   self.ckpt)
        self.mounted = True
        h.make()
        # the driver's address on the switch: it reaches every host whatever
        # happens to one host's link
        pxhosts.sh("ip", "-n", h.sw, "addr", "add", "10.%d.0.250/24" % h.net, "dev", "br0")
        wrap = os.path.join(self.workdir, "pctl-switch")
        with open(wrap, "w") as f:
            f.write("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n" % (h.sw, self.args.pctl))
        os.chmod(wrap, 0o755)
        self.clients = [Pctl(wrap, d) for d in h.daemons]
        for d in h.daemons:
            d.start()
        pc.wait_all_alive(h.daemons, self.clients[0], 60, "the 3 hosts' daemons")
        log("hosts: %s" % ", ".join("%s at %s" % (d.name, d.addr) for d in h.daemons))

    def client(self, prefer=0):
        return self.clients[prefer]

    def call(self, fn, *a, prefer=0, timeout=60):
        """fn(client, *a) on the preferred daemon, else any other, retried
        until `timeout` (daemons may be down or cut off for a while)."""
        end = time.time() + timeout
        last = None
        while time.time() < end:
            for i in [prefer] + [k for k in range(len(self.clients)) if k != prefer]:
                try:
                    return fn(self.clients[i], *a)
                except (pc.ClientError, subprocess.TimeoutExpired, ValueError) as e:
                    last = e
            time.sleep(0.5)
        raise AssertionError("no daemon answered within %d s: %s" % (timeout, last))

    def submit(self, steps, export, ckpt=True):
        argv = ["submit", "--data", self.data, "--dp", 4, "--steps", steps,
                "--export-safetensors", export, "--name", "soak-%s" % os.path.basename(export)]
        for k, v in MODEL.items():
            argv += ["--" + k, v]
        if ckpt:
            argv += ["--checkpoint-every", CKPT_EVERY, "--checkpoint-dir", self.ckpt,
                     "--max-restarts", 100]
        return self.client().json(*argv)["job_id"]

    def size_tmpfs(self, steps):
        """Room on the checkpoint tmpfs for every checkpoint the job writes
        (nothing deletes old ones) with a margin: a full disk is the
        disk-full fault's doing only."""
        global TMPFS_MB
        gc = MODEL
        params = (256 * gc["dim"] + gc["seq"] * gc["dim"] + gc["layers"] *
                  (12 * gc["dim"] * gc["dim"] + 13 * gc["dim"]) + 2 * gc["dim"])
        per = params * 3 * 4 * 1.2 + 8192
        TMPFS_MB = int((steps // CKPT_EVERY + 4) * per * 1.5 / 2**20) + 8
        pxhosts.sh("mount", "-o", "remount,size=%dm" % TMPFS_MB, self.ckpt)
        log("checkpoint tmpfs %s: %d MiB (%d checkpoints of ~%.0f KiB)"
            % (self.ckpt, TMPFS_MB, steps // CKPT_EVERY, per / 1024))

    # ------------------------------------------------------------ the chain
    def job(self, job_id):
        # the coordinator answers for its jobs; any daemon relays
        return self.call(lambda c: c.job(job_id), prefer=0, timeout=120)

    def follow(self):
        """(job dict of the chain's current job): moves along restarts."""
        while True:
            cur = self.chain[-1]
            j = self.job(cur)
            st = pc.job_state(j)
            if st != "FAILED":
                return j
            m = re.search(r"restarted as (\S+)", j.get("reason", ""))
            if not m:
                raise AssertionError("job %s FAILED without a restart: %s" % (cur, j.get("reason")))
            self.chain.append(m.group(1))
            log("  %s FAILED (%s); restarted as %s" % (cur, j["reason"][:140], m.group(1)))

    def resume_step(self, j):
        m = re.search(r"step_(\d+)$", j.get("spec", {}).get("resume_dir", "") or "")
        return int(m.group(1)) if m else 0

    def wait_progress(self, after_step, timeout=300):
        """Waits until the chain's job is RUNNING past `after_step` (or
        COMPLETED); returns (job dict, seconds)."""
        t = time.time()
        while time.time() - t < timeout:
            j = self.follow()
            st = pc.job_state(j)
            if st == "COMPLETED":
                return j, time.time() - t
            if st == "CANCELLED":
                raise AssertionError("job %s CANCELLED" % self.chain[-1])
            if st == "RUNNING" and j.get("step", 0) > after_step:
                return j, time.time() - t
            time.sleep(0.4)
        raise AssertionError("no progress past step %d within %d s (job %s)"
                             % (after_step, timeout, self.chain[-1]))

    # ------------------------------------------------------------ faults
    def rank_kill(self, f):
        pids = pc.rank_pids(self.chain[-1])
        if not pids:
            f["what"] = "no rank running (skipped)"
            return False
        pid = self.rng.choice(sorted(pids))
        os.kill(pid, signal.SIGKILL)
        f["expect"] = True
        f["what"] = "SIGKILL rank pid %d of %s" % (pid, self.chain[-1])
        return True

    def daemon_kill(self, f):
        i = self.rng.randrange(len(self.h.daemons))
        d = self.h.daemons[i]
        pid = d.daemon_pid()
        if not pid:
            f["what"] = "%s not running (skipped)" % d.name
            return False
        down = self.rng.uniform(1.0, 5.0)
        holds = [r for r in self.job(self.chain[-1]).get("ranks", []) if r.get("node") == d.name]
        f["expect"] = bool(holds)
        os.kill(pid, signal.SIGKILL)
        try:
            d.proc.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s's namespace did not end after SIGKILL" % d.name)
        pc.wait_for(lambda: not os.path.exists("/proc/%d" % pid), 20, "parallaxd gone")
        time.sleep(down)
        d.start()
        pc.wait_for(lambda: self._node_up(i), 60, "%s back" % d.name, 0.5)
        f["what"] = "SIGKILL parallaxd of %s (%s%d of the job's ranks), started again after " \
                    "%.1f s" % (d.name, "the coordinator, " if i == 0 else "", len(holds), down)
        return True

    def _node_up(self, i):
        try:
            return self.clients[i].nodes() and True
        except (pc.ClientError, subprocess.TimeoutExpired, ValueError):
            return False

    def link_drop(self, f):
        i = self.rng.randrange(len(self.h.daemons))
        secs = self.rng.uniform(2.0, 6.0)
        self.drop(i)
        time.sleep(secs)
        self.h.loss(i, 0)   # deletes the table, as for pxhosts' partial loss
        f["what"] = "all packets of %s dropped for %.1f s (nftables)" % (
            self.h.daemons[i].name, secs)
        return True

    def drop(self, i):
        """Every packet in or out of host i's eth0 dropped (nftables; the
        table pxhosts.loss() uses, so loss(i, 0) lifts it)."""
        rules = ("table inet pxloss {\n"
                 " chain in { type filter hook input priority 0; iifname \"eth0\" drop; }\n"
                 " chain out { type filter hook output priority 0; oifname \"eth0\" drop; }\n"
                 "}\n")
        r = subprocess.run(["ip", "netns", "exec", self.h.ns[i], "nft", "-f", "-"],
                           input=rules.encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError("nft: %s" % r.stdout.decode(errors="replace"))

    def disk_full(self, f):
        """Fills the checkpoint tmpfs; empties it again once the chain has
        moved on (a failed checkpoint) or after 3 checkpoint intervals."""
        first = self.chain[-1]
        wrote = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for size in (1 << 20, 4096, 1):
            chunk = b"\1" * size
            try:
                while True:
                    wrote += os.write(fd, chunk)
            except OSError:
                pass
        os.close(fd)
        st = os.statvfs(self.ckpt)
        free = st.f_bavail * st.f_frsize
        j0 = self.follow()
        steps_per_s = max(self.rate, 1e-3)
        hold = min(60.0, max(20.0, 3 * CKPT_EVERY / steps_per_s))
        t = time.time()
        met = False
        while time.time() - t < hold:
            self.follow()
            if self.chain[-1] != first:
                met = True
                break
            time.sleep(0.5)
        os.unlink(self.filler)
        f["what"] = ("checkpoint tmpfs filled (%.1f MiB written, %d bytes left) for %.1f s: %s"
                     % (wrote / 2**20, free, time.time() - t,
                        "a checkpoint failed and the job restarted" if met else
                        "the job wrote no checkpoint meanwhile (step %d)" % j0.get("step", 0)))
        return True

    # ------------------------------------------------------------ runs
    def reference(self, steps):
        export = os.path.join(self.workdir, "reference.safetensors")
        t = time.time()
        jid = self.submit(steps, export, ckpt=False)
        j = pc.wait_state(self.client(), jid, TERMINAL, 1200)
        assert pc.job_state(j) == "COMPLETED", j
        dt = time.time() - t
        self.rate = steps / dt
        log("reference: %s COMPLETED %d steps uninterrupted in %.1f s (loss %.4f)"
            % (jid, steps, dt, j["loss"]))
        self.ref_id = jid
        return export, dt

    def chaos(self, steps, n_faults):
        export = os.path.join(self.workdir, "soak.safetensors")
        kinds = ["rank-kill", "daemon-kill", "link-drop"]
        disk_at = self.rng.randrange(3, max(4, n_faults // 2))
        t0 = time.time()
        self.chain = [self.submit(steps, export)]
        log("chaos: %s submitted (%d steps, checkpoint every %d, max-restarts 100); "
            "%d faults planned" % (self.chain[0], steps, CKPT_EVERY, n_faults))
        j, _ = self.wait_progress(0, timeout=300)
        while len(self.faults) < n_faults and pc.job_state(j) != "COMPLETED":
            run_for = self.rng.uniform(3.0, 10.0)
            end = time.time() + run_for
            while time.time() < end and pc.job_state(j) != "COMPLETED":
                time.sleep(0.5)
                j = self.follow()
            if pc.job_state(j) == "COMPLETED":
                break
            if pc.job_state(j) != "RUNNING":
                j, _ = self.wait_progress(j.get("step", 0))
                continue
            kind = "disk-full" if len(self.faults) == disk_at else self.rng.choice(kinds)
            f = {"n": len(self.faults) + 1, "kind": kind, "t": time.time() - t0,
                 "job": self.chain[-1], "step": j.get("step", 0), "chain_len": len(self.chain)}
            ti = time.time()
            done = {"rank-kill": self.rank_kill, "daemon-kill": self.daemon_kill,
                    "link-drop": self.link_drop, "disk-full": self.disk_full}[kind](f)
            if not done:
                log("fault skipped: %s" % f["what"])
                continue
            log("fault %d: %s at step %d of %s: %s" % (f["n"], kind, f["step"], f["job"],
                                                        f["what"]))
            # the fault's effect: a failure (and restart) is detected within
            # the heartbeat timeout and the collective deadline
            settle = time.time() + (30 if f.get("expect") else
                                    (PEER_DEAD_MS + COMM_MS) / 1000.0)
            t_end, end_step, t_adv = time.time(), None, None
            while time.time() < settle:
                j = self.follow()
                if len(self.chain) > f["chain_len"] or pc.job_state(j) == "COMPLETED":
                    break
                if end_step is None:
                    end_step = j.get("step", 0)
                elif t_adv is None and j.get("step", 0) > end_step:
                    t_adv = time.time()
                time.sleep(0.4)
            if f.get("expect") and len(self.chain) == f["chain_len"] and \
                    pc.job_state(j) != "COMPLETED":
                self.problems.append("fault %d (%s) did not fail the job" % (f["n"], kind))
            # progress again: past the step of the newest job's checkpoint
            # (or, without a restart, past the step the fault found)
            j, _ = self.wait_progress(0, timeout=600)
            resumed = self.resume_step(j) if len(self.chain) > f["chain_len"] else f["step"]
            j, _ = self.wait_progress(resumed, timeout=600)
            f["restarts"] = len(self.chain) - f["chain_len"]
            f["lost"] = 0
            for k in range(f["chain_len"] - 1, len(self.chain) - 1):
                old_j, new_j = self.job(self.chain[k]), self.job(self.chain[k + 1])
                f["lost"] += max(0, old_j.get("step", 0) - self.resume_step(new_j))
            # the cost in time: with a restart, from the fault to training
            # past the resumed step; without, how long training stood still
            # (from the fault until a step after the injection had ended)
            f["recovery_s"] = time.time() - ti if f["restarts"] else \
                (t_adv or time.time()) - t_end
            self.faults.append(f)
            log("  -> %d restart(s), %d step(s) lost, progressing again after %.1f s (job %s "
                "step %d)" % (f["restarts"], f["lost"], f["recovery_s"], self.chain[-1],
                             j.get("step", 0)))
        while pc.job_state(j) != "COMPLETED":
            j, _ = self.wait_progress(j.get("step", 0), timeout=600)
        dt = time.time() - t0
        log("chaos: %s COMPLETED %d steps after %d faults and %d restarts in %.1f s"
            % (self.chain[-1], j["step"], len(self.faults), len(self.chain) - 1, dt))
        return export, j, dt

    # ------------------------------------------------------------ checks
    def check_leftovers(self, before_shm, stopped):
        found = []
        ranks = [p for p in _all_rank_pids()]
        if ranks:
            found.append("parallax-rank processes: %s" % ranks)
        ids = set(self.chain) | {self.ref_id}
        for root, dirs, _ in os.walk("/sys/fs/cgroup"):
            for dname in dirs:
                if any(i in dname for i in ids) or (stopped and any(
                        "parallax-%s" % d.name in dname for d in self.h.daemons)):
                    found.append("cgroup %s" % os.path.join(root, dname))
        if not stopped:
            for e in sorted(os.listdir(self.ckpt)):
                sd = os.path.join(self.ckpt, e)
                if not os.path.isdir(sd):
                    found.append("checkpoint dir: %s" % e)
                    continue
                tmps = [x for x in os.listdir(sd) if x.endswith(".tmp")]
                if tmps or not os.path.exists(os.path.join(sd, "meta.json")):
                    found.append("checkpoint %s: %s" % (e, tmps or "no meta.json"))
        # this namespace's /dev/shm is shared with whatever else runs on the
        # machine: a new file is ours to answer for only if it outlives a
        # few seconds with no process mapping it (an orphan); the hosts'
        # ranks see a private /dev/shm each (checked above) and cannot write
        # here at all
        new = set(os.listdir("/dev/shm")) - before_shm
        if new and stopped:
            time.sleep(5)
            new &= set(os.listdir("/dev/shm"))
            mapped = _mapped_shm()
            orphans = sorted(x for x in new if x not in mapped)
            if orphans:
                found.append("/dev/shm here: %s" % orphans)
            self.shm_others = sorted(new - set(orphans))
        for i, d in enumerate(self.h.daemons):
            ns = self.h.ns[i]
            if not stopped:
                pid = d.daemon_pid()
                shm = subprocess.run(["nsenter", "-t", str(pid), "-m", "ls", "-A", "/dev/shm"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
                if shm.strip():
                    found.append("/dev/shm of %s: %s" % (d.name, shm.decode().split()))
            ss = pxhosts.sh("ip", "netns", "exec", ns, "ss", "-Htlnu")
            ports = sorted({ln.split()[4].replace("[::ffff:", "").replace("]:", ":")
                            for ln in ss.splitlines() if ln.strip()})
            allowed = set() if stopped else {"%s:7001" % d.addr, "%s:7002" % d.addr}
            extra = [p for p in ports if p not in allowed]
            if extra:
                found.append("listening in %s: %s" % (d.name, extra))
            est = pxhosts.sh("ip", "netns", "exec", ns, "ss", "-Htn", "state", "established")
            if stopped and est.strip():
                found.append("connections in %s: %s" % (d.name, est.strip()[:300]))
        return found

    def check_history(self):
        """Every daemon lists the chain; the coordinator's store has it."""
        problems = []
        for i, c in enumerate(self.clients):
            listed = {x["id"]: x for x in self.call(lambda cc: cc.jobs(), prefer=i)}
            missing = [x for x in self.chain if x not in listed]
            if missing:
                problems.append("%s does not list %s" % (self.h.daemons[i].name, missing))
        for k, jid in enumerate(self.chain):
            j = self.job(jid)
            st = pc.job_state(j)
            last = k == len(self.chain) - 1
            if last and st != "COMPLETED":
                problems.append("%s is %s" % (jid, st))
            if not last and (st != "FAILED" or ("restarted as %s" % self.chain[k + 1])
                             not in j.get("reason", "")):
                problems.append("%s: %s, reason %r" % (jid, st, j.get("reason")))
        self.db_rows = None
        return problems

    def check_store(self, steps):
        """After the daemons stopped: the coordinator's SQLite."""
        problems = []
        d = self.h.daemons[0]
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(d.state_dir, "parallax.db"),
                             uri=True)
        rows = {r[0]: r for r in db.execute("SELECT id, state, reason, step FROM jobs")}
        for k, jid in enumerate(self.chain):
            r = rows.get(jid)
            if not r:
                problems.append("%s not in the store" % jid)
                continue
            want = 4 if k == len(self.chain) - 1 else 5   # JOB_COMPLETED, JOB_FAILED
            if r[1] != want:
                problems.append("%s stored state %d, not %d" % (jid, r[1], want))
            n_ev = db.execute("SELECT COUNT(*) FROM events WHERE job = ?", (jid,)).fetchone()[0]
            if n_ev < 2:
                problems.append("%s has %d events" % (jid, n_ev))
        last = self.chain[-1]
        mx = db.execute("SELECT MAX(step) FROM metrics WHERE job = ?", (last,)).fetchone()[0]
        if mx != steps:
            problems.append("metrics of %s end at step %s, not %d" % (last, mx, steps))
        n_events = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        db.close()
        self.store_summary = "%d jobs, %d events in %s's store" % (len(rows), n_events, d.name)
        return problems

    def cleanup(self, keep):
        try:
            if os.path.exists(self.filler):
                os.unlink(self.filler)
        except OSError:
            pass
        for i in range(len(self.h.daemons)):
            try:
                self.h.loss(i, 0)
            except Exception:
                pass
        self.h.cleanup(keep_files=True)
        if self.mounted:
            subprocess.run(["umount", "-l", self.ckpt])
        if not keep:
            import shutil
            shutil.rmtree(self.workdir, ignore_errors=True)


def _all_rank_pids():
    out = []
    for pid, argv in pc.live_procs():
        if argv and argv[0].endswith(b"parallax-rank") and b"soak-" in b" ".join(argv):
            out.append(pid)
    return out


def _mapped_shm():
    """Names of /dev/shm files some live process maps or holds open."""
    names = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/maps" % d) as f:
                for ln in f:
                    if " /dev/shm/" in ln:
                        names.add(ln.rsplit("/dev/shm/", 1)[1].split()[0])
            for fd in os.listdir("/proc/%s/fd" % d):
                t = os.readlink("/proc/%s/fd/%s" % (d, fd))
                if t.startswith("/dev/shm/"):
                    names.add(t[9:].split()[0])
        except OSError:
            continue
    return names


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallaxd", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--pctl", required=True)
    ap.add_argument("--rank", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--faults", type=int, default=24)
    ap.add_argument("--steps", type=int, default=0,
                    help="job steps (default: sized from a probe run to outlast the faults)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    why = pxhosts.Hosts.probe()
    if why:
        print("SKIP: %s" % why)
        return 77
    for exe in (args.pctl, args.rank, args.parallaxd):
        if not os.access(exe, os.X_OK):
            print("SKIP: %s not built" % exe)
            return 77
    print("soak: seed %d (replay: --seed %d), %d faults" % (args.seed, args.seed, args.faults),
          flush=True)
    s = Soak(args)
    before_shm = set(os.listdir("/dev/shm"))
    ok = False
    report = []
    try:
        s.start()
        steps = args.steps
        if not steps:
            # size the job: its running time should outlast the faults'
            # intervals (6.5 s average) with room to spare
            probe_export = os.path.join(s.workdir, "probe.safetensors")
            t = time.time()
            pid = s.submit(1500, probe_export, ckpt=False)
            j = pc.wait_state(s.client(), pid, TERMINAL, 600)
            assert pc.job_state(j) == "COMPLETED", j
            rate = 1500 / (time.time() - t)
            # about one checkpoint every 2 s of training; running time for
            # each fault's interval (6.5 s on average) and the part of its
            # settling the job trains through, with room to spare
            global CKPT_EVERY
            CKPT_EVERY = max(10, int(rate * 2.0 / 10) * 10)
            steps = int(rate * 22.0 * args.faults / CKPT_EVERY + 1) * CKPT_EVERY
            log("probe: %.1f steps/s with start-up; the soak job gets %d steps, a checkpoint "
                "every %d" % (rate, steps, CKPT_EVERY))
        s.size_tmpfs(steps)
        ref_export, ref_s = s.reference(steps)
        soak_export, final, soak_s = s.chaos(steps, args.faults)

        time.sleep(2)
        left_running = s.check_leftovers(before_shm, stopped=False)
        history = s.check_history()
        same = sha(ref_export) == sha(soak_export)
        size = os.path.getsize(soak_export)
        s.h.stop()
        # each daemon's own word that it stopped cleanly (parallaxd is the
        # init of its PID namespace: unshare's exit status is not its own)
        clean = ["node %s stopped" % d.name in d.log_since_start() for d in s.h.daemons]
        left_stopped = s.check_leftovers(before_shm, stopped=True)
        store = s.check_store(steps)

        by_kind = {}
        for f in s.faults:
            k = by_kind.setdefault(f["kind"], [0, 0, 0, 0.0])
            k[0] += 1
            k[1] += f["restarts"]
            k[2] += f["lost"]
            k[3] += f["recovery_s"]
        report.append("=" * 78)
        report.append("SOAK REPORT  seed %d  (replay: tests/soak/run.sh --seed %d)"
                      % (args.seed, args.seed))
        report.append("job: dp=4 over 3 namespace hosts x 2 cpu devices, %d layers dim %d "
                      "seq %d batch %d, %d steps, checkpoint every %d on a %d MiB tmpfs"
                      % (MODEL["layers"], MODEL["dim"], MODEL["seq"], MODEL["batch"], steps,
                         CKPT_EVERY, TMPFS_MB))
        report.append("recov: seconds from the fault until training passed its resumed "
                      "step (with a restart); stall: without one, seconds training stood "
                      "still after the fault ended")
        report.append("%-3s %7s  %-11s %-9s %5s  %3s %5s %13s  %s" % (
            "#", "t(s)", "fault", "job", "step", "rst", "lost", "recov/stall", "what"))
        for f in s.faults:
            report.append("%-3d %7.1f  %-11s %-9s %5d  %3d %5d %13s  %s" % (
                f["n"], f["t"], f["kind"], f["job"].rsplit("-", 1)[-1], f["step"],
                f["restarts"], f["lost"], ("recov %.1fs" if f["restarts"] else "stall %.1fs")
                % f["recovery_s"], f["what"]))
        report.append("by kind:")
        for k, (n, r, lost, rec) in sorted(by_kind.items()):
            report.append("  %-11s %3d faults, %3d restarts, %5d steps lost, %.1f s "
                          "recovery/stall on average" % (k, n, r, lost, rec / n))
        report.append("totals: %d faults, %d restarts (jobs %s), %d steps lost and redone"
                      % (len(s.faults), len(s.chain) - 1,
                         " -> ".join(x.rsplit("-", 1)[-1] for x in s.chain),
                         sum(f["lost"] for f in s.faults)))
        report.append("time: uninterrupted %.1f s, under chaos %.1f s (%+.1f s, x%.2f; "
                      "the machine is shared, so its speed varies between the two)"
                      % (ref_s, soak_s, soak_s - ref_s, soak_s / ref_s))
        report.append("final: %s COMPLETED step %d, loss %.6f" % (s.chain[-1], final["step"],
                                                                  final["loss"]))
        report.append("parameters: %s (%d bytes, sha256 %s) %s the uninterrupted run's"
                      % (os.path.basename(soak_export), size, sha(soak_export)[:16],
                         "BITWISE EQUAL to" if same else "DIFFER from"))
        no_cg = [d.name for d in s.h.daemons
                 if "no cgroup v2 hierarchy" in open(d.log_path, errors="replace").read()]
        report.append("left behind while the daemons ran: %s" % (left_running or "nothing"))
        if no_cg:
            report.append("  (cgroups: %s found no cgroup v2 hierarchy in their namespaces and "
                          "tracked ranks by process group; no cgroup named for a job exists)"
                          % ", ".join(no_cg))
        report.append("left behind after they stopped (%d of %d logged a clean stop): %s"
                      % (sum(clean), len(clean), left_stopped or "nothing"))
        if s.shm_others:
            report.append("  (/dev/shm here also got %s meanwhile, held by other processes "
                          "of this machine, not the soak's)" % s.shm_others)
        report.append("faults that did not do what they must: %s" % (s.problems or "none"))
        report.append("history: %s; %s" % (history or "every daemon lists all %d jobs of the "
                                           "chain, each failed one naming its successor"
                                           % len(s.chain),
                                           store or s.store_summary + ": all chain jobs, "
                                           "states, events and the last job's metrics to step "
                                           "%d" % steps))
        verdict = (same and not left_running and not left_stopped and not history and
                   not store and len(s.faults) >= min(20, args.faults) and all(clean) and
                   not s.problems)
        report.append("VERDICT: %s" % ("PASS" if verdict else "FAIL"))
        report.append("=" * 78)
        print("\n".join(report), flush=True)
        ok = verdict
    except BaseException:
        print(s.h.logs())
        raise
    finally:
        s.cleanup(args.keep or not ok)
        if not ok:
            print("work directory kept: %s" % s.workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
