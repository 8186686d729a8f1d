#!/usr/bin/python3
"""Integration: one GPU shared by two ranks (parallaxd --gpu-share) and the
GPU telemetry, on a simulated device with a fake NVML.

Two daemons: A with PX_SIM_DEVICE=1, `--devices cpu:2,sim:1 --gpu-share 2`
and the test double of libnvidia-ml.so.1 (tests/integration/fake_nvml.c,
first in its LD_LIBRARY_PATH; FAKE_NVML_FILE scripts GPU 0, which stands
for sim:0), B with two cpu devices, which learns A's GPU and its blocked
slots from A's heartbeats:
  * `pctl nodes --json`, asked of B, shows A's sim:0/0 and sim:0/1, each
    with half of the device's memory, and the GPU's telemetry (model, memory, utilization,
    power, temperature, processes); the text has the GPU MEM/UTIL column
    and a GPU line;
  * of the scripted processes, the daemon itself and a process carrying
    the daemon's PX_RANK_OWNER (as its ranks do) are its own, a pid that
    does not exist here (exited, or in another PID namespace) is listed
    only; a fourth is foreign: listed in foreign_pids, both slots BLOCKED naming its pid, a
    warning in the daemon's log;
  * a dp=2 job on `--devices sim:0`, submitted to B (its coordinator),
    waits PENDING while the foreign process is there; once it is gone the job is placed on sim:0/0 and sim:0/1 (the
    one device, shared), completes, and its losses and grad norms equal,
    bit for bit, those of the same job on two cpu devices and those of the
    standalone dp=2 run of parallax-rank on the simulated device; its MFU
    (PX_PEAK_TFLOPS given) counts the one device's peak: per token/s twice
    the cpu job's, whose two ranks have a device each;
  * the memory check at submit divides the device among its slots: a job
    too big is refused naming the slot's share (256 MiB of 512);
  * a third daemon, `--devices cuda --gpu-share 2` with the fake NVML's two
    GPUs, offers cuda:0/0, cuda:1/0, cuda:0/1, cuda:1/1 (slot 0 of every GPU
    first), each with half of its GPU's memory, and samples both GPUs;
  * a bad --gpu-share stops the daemon at start naming the value.
Exit 77 when parallax-rank, pctl or the fake NVML was not built."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxpctl import Pctl, pctl_fail  # noqa: E402

SIM_MB = 512
MODEL = ["--dp", 2, "--batch", 4, "--steps", 6, "--layers", 2, "--heads", 2, "--dim", 32,
         "--seq", 16, "--lr", 1e-3, "--seed", 7]
GPU = "Fake-H200 %d %d 37 215000 51 %s\n"  # model total used util% mW temp pids


def script(path, pids, util=37):
    with open(path + ".tmp", "w") as f:
        f.write((GPU % (SIM_MB << 20, 96 << 20, ",".join(str(p) for p in pids) or "-"))
                .replace(" 37 ", " %d " % util))
    os.replace(path + ".tmp", path)


def facts_changes(d):
    """How often A's gossiped facts changed (each raises its incarnation)."""
    return open(d.log_path, errors="replace").read().count("facts changed: incarnation")


def run_job(c, data, devices, name):
    jid = c.json("submit", "--data", data, *MODEL, "--no-val", "--devices", devices,
                 "--name", name)["job_id"]
    j = pc.wait_state(c, jid, ("COMPLETED", "FAILED", "CANCELLED"), 180)
    if pc.job_state(j) != "COMPLETED":
        raise AssertionError("job on %s: %s (%s)\nrank 0 log:\n%s" % (
            devices, pc.job_state(j), j.get("reason"), c.logs(jid, 0)[-3000:]))
    return jid, j


def standalone(rank, data, work, env):
    """The same job as parallax-rank's standalone dp=2 run on the simulated
    device; rank 0's metrics rows."""
    port = pc.free_port()
    out = os.path.join(work, "standalone-%r.jsonl")
    procs = []
    for r in range(2):
        e = dict(env, PX_RANK=str(r), PX_WORLD_SIZE="2", PX_MASTER_ADDR="127.0.0.1",
                 PX_MASTER_PORT=str(port))
        procs.append(subprocess.Popen([rank, "--data", data, "--device", "sim",
                                       "--metrics-out", out] + [str(a) for a in MODEL],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in procs:
        text = p.communicate(timeout=180)[0].decode(errors="replace")
        assert p.returncode == 0, "standalone rank: exit %d\n%s" % (p.returncode, text[-3000:])
    return [json.loads(line) for line in open(out.replace("%r", "0"))]


def main():
    args = pc.parse_args(sys.argv[1:])
    fake_dir = os.environ.get("PX_TEST_FAKE_NVML_DIR", "")
    if not os.path.exists(os.path.join(fake_dir, "libnvidia-ml.so.1")):
        print("SKIP: the fake NVML (tests/integration/fake_nvml.c) is not built")
        return 77
    for exe in (args.rank, args.pctl):
        if not exe or not os.access(exe, os.X_OK):
            print("SKIP: %s not built" % (exe or "pctl/parallax-rank"))
            return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="gshare")
    nvml_file = os.path.join(cl.workdir, "nvml.txt")
    cl.env.update({"PX_SIM_DEVICE": "1", "PX_SIM_DEVICE_MB": str(SIM_MB), "PX_SHM": "0",
                   "PX_PEAK_TFLOPS": "0.1",
                   "PX_RANK_BIN": os.path.abspath(args.rank), "PX_GPU_SAMPLE_MS": "200",
                   "PX_LOG_LEVEL": "debug",
                   "FAKE_NVML_FILE": nvml_file,
                   "LD_LIBRARY_PATH": fake_dir + ":" + os.environ.get("LD_LIBRARY_PATH", "")})
    d, db = cl.daemons
    d.env = db.env = cl.env
    d.extra = ["--devices", "cpu:2,sim:1", "--gpu-share", "2"]
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    sleepers = []

    def kill_sleepers(failed):
        for p in sleepers:
            p.kill()
            p.wait()
    cl.on_exit(kill_sleepers)
    with cl:
        cl.start(lambda daemon: Pctl(args.pctl, daemon))
        c, cb = Pctl(args.pctl, d), Pctl(args.pctl, db)
        # processes the fake GPU shows: the daemon, one marked as its own
        # (its ranks' PX_RANK_OWNER) and a stranger
        state_real = os.path.realpath(d.state_dir)
        owned = subprocess.Popen(["sleep", "300"], env=dict(os.environ, PX_RANK_OWNER=state_real))
        stranger = subprocess.Popen(["sleep", "300"])
        sleepers += [owned, stranger]
        gone = next(p for p in range(4194000, 1000, -1) if not os.path.exists("/proc/%d" % p))
        script(nvml_file, [d.proc.pid, owned.pid, gone, stranger.pid])

        def telemetry():  # A's, as B heard it
            n = [n for n in cb.nodes() if n["name"] == d.name][0]
            g = n.get("gpus") or []
            return n if g and g[0]["sampled_ms"] > 0 and len(g[0]["pids"]) == 4 else None
        n = pc.wait_for(telemetry, 30, "the GPU's telemetry with 4 processes in pctl nodes")
        devs = {v["name"]: v for v in n["devices"]}
        assert sorted(devs) == ["cpu:0", "cpu:1", "sim:0/0", "sim:0/1"], sorted(devs)
        for k in ("sim:0/0", "sim:0/1"):
            assert devs[k]["mem_total"] == (SIM_MB << 20) // 2, devs[k]
            assert str(stranger.pid) in devs[k].get("blocked", ""), devs[k]
        (g,) = n["gpus"]
        assert g["device"] == "sim:0" and g["model"] == "Fake-H200", g
        assert g["memory_total"] == SIM_MB << 20 and g["memory_used"] == 96 << 20, g
        assert abs(g["utilization"] - 0.37) < 1e-9 and abs(g["power_watts"] - 215.0) < 1e-9, g
        assert g["temperature_celsius"] == 51, g
        assert sorted(g["pids"]) == sorted([d.proc.pid, owned.pid, gone, stranger.pid]), g
        assert g["foreign_pids"] == [stranger.pid], g
        text = cb.run("nodes")
        assert "GPU MEM/UTIL" in text and "0.1/0.5G 37%" in text, text
        assert "Fake-H200" in text and "FOREIGN process pid %d" % stranger.pid in text, text
        assert "BLOCKED" in text, text
        log = open(d.log_path, errors="replace").read()
        assert "pid %d (sleep) is not a rank of this node" % stranger.pid in log, log[-2000:]
        print("pctl nodes, a foreign process on the shared device:\n%s" % text.rstrip())

        # the samples change every PX_GPU_SAMPLE_MS: they reach B through
        # A's own pings and answers, and are no change of A's gossiped
        # facts (else A would raise its incarnation and gossip every sample)
        before = facts_changes(d)
        for util in range(40, 56):
            script(nvml_file, [d.proc.pid, owned.pid, gone, stranger.pid], util)
            time.sleep(0.25)
        pc.wait_for(lambda: abs([n for n in cb.nodes() if n["name"] == d.name][0]["gpus"][0]
                                ["utilization"] - 0.55) < 1e-9, 30,
                    "B hearing A's last sampled utilization (55%)")
        changes = facts_changes(d) - before
        assert changes == 0, "A's facts changed %d times over 16 samples" % changes
        print("16 samples of a changing utilization: B heard the last (55%%), A's facts "
              "changed %d times" % changes)

        # the memory check: each slot has half of the device, and a job
        # of 345 MB a rank (pctl plan --device sim) fits the device, not a slot
        big = ["submit", "--data", data, "--dp", 2, "--batch", 4, "--steps", 2, "--layers", 8,
               "--heads", 4, "--dim", 448, "--seq", 64, "--zero", 0, "--devices", "sim:0"]
        pctl_fail(cb, "a job too big for a slot", big, ["node %s has 256.0 MiB" % d.name], 1)

        # blocked: the job waits; the stranger gone, it runs on both slots
        jid = cb.json("submit", "--data", data, *MODEL, "--no-val", "--devices", "sim:0",
                      "--name", "shared")["job_id"]
        time.sleep(2)
        j = cb.json("status", jid)
        assert pc.job_state(j) == "PENDING", j
        stranger.kill()
        stranger.wait()
        script(nvml_file, [d.proc.pid, owned.pid])
        j = pc.wait_state(cb, jid, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(j) == "COMPLETED", (j, cb.logs(jid, 0)[-3000:])
        assert sorted(r["device"] for r in j["ranks"]) == ["sim:0/0", "sim:0/1"], j["ranks"]
        assert all(r["node"] == d.name for r in j["ranks"]), j["ranks"]
        log = open(d.log_path, errors="replace").read()
        assert "its devices are handed out again" in log, log[-2000:]
        print("job %s waited PENDING while pid %d held the device, then ran on %s"
              % (jid, stranger.pid, sorted(r["device"] for r in j["ranks"])))

        cpu_id, _ = run_job(c, data, "cpu", "on-cpu")
        ms, mc = cb.metrics(jid), c.metrics(cpu_id)
        env = dict(cl.env, OPENBLAS_NUM_THREADS="1")
        mst = standalone(args.rank, data, cl.workdir, env)
        assert len(ms) == 6 and len(mc) == 6 and len(mst) == 6, (len(ms), len(mc), len(mst))
        for a, b, s in zip(ms, mc, mst):
            for k in ("loss", "grad_norm"):
                assert pc.finite(a[k]) and a[k] == b[k], "step %d %s: shared %r cpu %r" % (
                    a["step"], k, a[k], b[k])
                assert a[k] == s[k], "step %d %s: shared %r standalone %r" % (
                    a["step"], k, a[k], s[k])
        print("dp=2 on one shared sim device = dp=2 on cpu = standalone dp=2 on sim, bit for "
              "bit: losses %s" % ", ".join("%.6f" % m["loss"] for m in ms))
        # MFU over the physical devices: the two slots of one device share
        # its one peak, the cpu job's two devices have two; the same model,
        # so per token/s the shared job's MFU is twice the cpu job's
        per_tps = [[m["mfu"] / m["tokens_per_second"] for m in x] for x in (ms, mc)]
        for step, (a, b) in enumerate(zip(*per_tps), 1):
            assert abs(a - 2 * b) <= 1e-6 * a, "step %d: mfu per token/s shared %r cpu %r" % (
                step, a, b)
        print("MFU per token/s: shared device %.4g, 2 cpu devices %.4g (the shared job divides "
              "by 1 peak, not 2)" % (per_tps[0][0], per_tps[1][0]))

        # GPUs found through NVML, shared: slot 0 of each GPU first
        gpus_file = os.path.join(cl.workdir, "nvml2.txt")
        with open(gpus_file, "w") as f:
            f.write("Fake-H200 150000000000 1000000000 10 100000 40 -\n"
                    "Fake-H200 150000000000 3000000000 90 600000 70 -\n")
        env = dict(cl.env, FAKE_NVML_FILE=gpus_file)
        gd = pc.Daemon(args.parallaxd, d.name + "g", cl.workdir, 1, env)
        gd.extra = ["--devices", "cuda", "--gpu-share", "2"]
        gd.start()
        try:
            cg = Pctl(args.pctl, gd)

            def sampled():
                try:
                    (n,) = cg.nodes()
                except pc.ClientError:
                    return None  # not listening yet
                g = n.get("gpus") or []
                return n if len(g) == 2 and all(x["sampled_ms"] > 0 for x in g) else None
            n = pc.wait_for(sampled, 30, "the cuda daemon's two GPUs sampled")
            names = [v["name"] for v in n["devices"]]
            assert names == ["cuda:0/0", "cuda:1/0", "cuda:0/1", "cuda:1/1"], names
            assert all(v["mem_total"] == 75000000000 for v in n["devices"]), n["devices"]
            g0, g1 = n["gpus"]
            assert (g0["device"], g0["memory_used"], g1["device"], g1["memory_used"]) == \
                ("cuda:0", 1000000000, "cuda:1", 3000000000), n["gpus"]
            assert abs(g1["utilization"] - 0.9) < 1e-9 and g1["power_watts"] == 600, g1
            print("--devices cuda --gpu-share 2 on two fake GPUs: %s" % ", ".join(names))
        finally:
            assert gd.stop() == 0

        # a bad --gpu-share: the daemon does not start, naming the value
        for bad in ("0", "65", "two"):
            lone = pc.Daemon(args.parallaxd, d.name + "x", cl.workdir, 1, cl.env)
            lone.extra = ["--gpu-share", bad]
            code, out = lone.run_once()
            assert code != 0 and "gpu-share '%s'" % bad in out, (code, out)
        print("--gpu-share 0, 65, two: refused at start (%s)"
              % [l for l in out.splitlines() if "gpu-share" in l][0].strip())
        codes = cl.stop()
        assert codes == [0, 0], codes
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
