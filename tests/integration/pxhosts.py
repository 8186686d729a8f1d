"""pxhosts: "hosts" in network namespaces for integration tests (issue 16).

A Hosts fixture makes a switch namespace holding a Linux bridge, and per
host a network namespace joined to that bridge by a veth pair (host side
eth0 with 10.<net>.0.<i+1>/24, switch side on the bridge). Each host's
parallaxd runs in its host's network namespace and, through unshare(1), in
IPC, PID and mount namespaces of its own (a private /proc and /dev/shm), so UCX cannot use shared memory or cross-memory attach between hosts
and must take TCP over the veths, exactly as between machines; the ranks of
one host share its namespaces (and memory). Nothing is created or addressed
in the caller's network namespace: every link and address lives in the
namespaces made here, and all of them go in cleanup().

Faults: link(i, up) sets host i's switch-side veth down or up (the host's
cable pulled), loss(i, percent) drops that share of the packets each way on
host i's eth0 with nftables (`numgen random mod 100 < N drop`; these
kernels have no netem qdisc).

Needs root, ip (iproute2) and unshare (util-linux); Hosts.probe() says why
they cannot be used (the tests then exit 77 printing it)."""
import os
import shutil
import signal
import subprocess
import time

import pxcluster as pc


def sh(*argv, check=True):
    r = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(map(str, argv)), r.returncode,
                                                 r.stdout.decode(errors="replace").strip()))
    return r.stdout.decode(errors="replace")


class NsDaemon(pc.Daemon):
    """A parallaxd in host namespace `ns` listening on `addr`."""

    def __init__(self, exe, name, workdir, devices, env, ns, addr):
        super().__init__(exe, name, workdir, devices, env)
        self.ns, self.addr = ns, addr
        self.control = "%s:7001" % addr
        self.peer = "%s:7002" % addr
        self.pid = None
        self.extra = ["--control-remote", "yes"]  # pctl reaches it by the host address

    def start(self):
        os.makedirs(os.path.join(os.path.dirname(self.log_path), self.name), exist_ok=True)
        log = open(self.log_path, "ab")
        # own IPC + PID + mount namespaces (private /proc and /dev/shm):
        # no shared memory with the other hosts' ranks
        inner = "mount -t tmpfs tmpfs /dev/shm && exec \"$@\""
        argv = ["ip", "netns", "exec", self.ns, "unshare", "--ipc", "--pid", "--mount",
                "--mount-proc", "--kill-child=SIGTERM", "--", "sh", "-c", inner, "sh"]
        self.proc = subprocess.Popen(argv + self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env)
        log.close()

    def daemon_pid(self):
        """The parallaxd's pid as the caller's namespace sees it."""
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"parallaxd") and b"--name" in argv and \
                    argv[argv.index(b"--name") + 1] == self.name.encode():
                return int(d)
        return None

    def _stop(self, timeout=20):
        """SIGTERM to unshare, which sends it to parallaxd (the namespace's
        init); waits for parallaxd itself to be gone."""
        pid = self.daemon_pid()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        end = time.time() + timeout
        while pid and os.path.exists("/proc/%d" % pid) and time.time() < end:
            time.sleep(0.1)
        return self.proc.returncode if self.proc else None


class Hosts:
    """n hosts (namespaces) on one bridge, a parallaxd each with `devices`
    cpu devices, every daemon's peer list naming the others."""

    def __init__(self, parallaxd, n=2, devices=2, tag="hosts", env=None):
        self.id = "%x" % (os.getpid() & 0xfffff)
        self.net = 100 + os.getpid() % 100
        self.sw = "pxsw%s" % self.id
        self.ns = ["pxh%s%c" % (self.id, ord("a") + i) for i in range(n)]
        self.addrs = ["10.%d.0.%d" % (self.net, i + 1) for i in range(n)]
        self.cl = pc.Cluster(parallaxd, n=0, devices=devices, tag=tag, env=env)
        self.workdir, self.env = self.cl.workdir, self.cl.env
        self.daemons = [NsDaemon(parallaxd, "%s%s%c" % (tag, self.id, ord("a") + i),
                                 self.workdir, devices, self.env, self.ns[i], self.addrs[i])
                        for i in range(n)]
        for d in self.daemons:
            d.peers = [o.peer for o in self.daemons if o is not d]
        self.made = False

    @staticmethod
    def probe():
        """None when namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "not root: ip netns needs CAP_SYS_ADMIN"
        for tool in ("ip", "unshare", "nsenter"):
            if not shutil.which(tool):
                return "%s is not installed" % tool
        name = "pxprobe%d" % os.getpid()
        r = subprocess.run(["ip", "netns", "add", name], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            return "ip netns add refused: %s" % r.stdout.decode(errors="replace").strip()
        subprocess.run(["ip", "netns", "del", name])
        return None

    def veth(self, i):
        return "pxv%s%d" % (self.id, i), "pxs%s%d" % (self.id, i)

    def make(self):
        self.made = True
        sh("ip", "netns", "add", self.sw)
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")
        sh("ip", "-n", self.sw, "link", "set", "lo", "up")
        for i, ns in enumerate(self.ns):
            host_end, sw_end = self.veth(i)
            sh("ip", "netns", "add", ns)
            # made inside the host's namespace, one end moved to the switch
            sh("ip", "-n", ns, "link", "add", host_end, "type", "veth", "peer", "name", sw_end)
            sh("ip", "-n", ns, "link", "set", sw_end, "netns", self.sw)
            sh("ip", "-n", ns, "link", "set", host_end, "name", "eth0")
            sh("ip", "-n", ns, "addr", "add", "%s/24" % self.addrs[i], "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.sw, "link", "set", sw_end, "master", "br0")
            sh("ip", "-n", self.sw, "link", "set", sw_end, "up")

    def start(self, client_factory):
        self.make()
        for d in self.daemons:
            d.start()
        pc.wait_all_alive(self.daemons, client_factory(self.daemons[0]), 30,
                          "all %d namespace hosts' daemons to see each other" % len(self.daemons))

    def link(self, i, up):
        sh("ip", "-n", self.sw, "link", "set", self.veth(i)[1], "up" if up else "down")

    def loss(self, i, percent):
        """Drops `percent` % of host i's packets each way (0: the rule goes)."""
        ns = self.ns[i]
        sh("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "pxloss", check=False)
        if not percent:
            return
        rules = ("table inet pxloss {\n"
                 " chain in { type filter hook input priority 0; iifname \"eth0\" "
                 "numgen random mod 100 < %d drop; }\n"
                 " chain out { type filter hook output priority 0; oifname \"eth0\" "
                 "numgen random mod 100 < %d drop; }\n}\n" % (percent, percent))
        r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError("nft: %s" % r.stdout.decode(errors="replace"))

    def pctl(self, pctl_exe, i):
        """A pctl wrapper that runs in host i's namespace (the caller's has
        no route to the hosts): its path, for pxpctl.Pctl."""
        path = os.path.join(self.workdir, "pctl-%s" % self.ns[i])
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n" % (self.ns[i], pctl_exe))
        os.chmod(path, 0o755)
        return path

    def stop(self):
        return [d.stop() for d in self.daemons]

    def cleanup(self, keep_files=False):
        for d in self.daemons:
            d.stop()
        if self.made:
            for ns in self.ns + [self.sw]:
                subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        if not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self):
        return "\n".join("---- %s\n%s" % (d.name, d.log_tail()) for d in self.daemons)
