#!/usr/bin/python3
"""Integration (issue 12): the daemon's device path on simulated devices.

Two daemons started with PX_SIM_DEVICE=1 and `--devices cpu:2,sim:2`
(PX_SIM_DEVICE_MB=512) offer cpu:0,1 and sim:0,1 each:
  * `pctl nodes` lists sim:0 and sim:1 of every node with their memory
    (512 MiB total, 0 used at start) in its text and JSON;
  * a dp=2 job submitted with `--devices sim:0,1` runs both ranks on sim
    devices (`pctl status` shows them and the job's devices line), completes, and its per-step losses and grad
    norms equal those of the same job with `--devices cpu` bit for bit
    (the sim ops are the CPU ops; PX_SHM=0 so both jobs reduce in the UCX
    host path's order, tests/engine/test_sim.py) - and so within 1e-5;
  * `pctl status` (text and JSON "comm_paths") gives each communicator's
    paths as its ranks reported them: host collectives over UCX, the sim
    job's device collectives through IPC or staging, the cpu job's none;
  * `pctl mem` of the sim job gives each rank's device memory (used > 0,
    total = the 512 MiB arena) in the device-GB column and JSON "device";
    the cpu job's ranks show none;
  * bad device names are rejected at submit naming the value: pctl itself
    refuses `--devices gpu:0` and `--devices sim:x` (exit 2); the daemon
    refuses `--devices cuda` (no node has a GPU) and `--devices sim:5`
    (exit 1), naming the value and the kinds the cluster offers;
  * a daemon asked for sim:N without PX_SIM_DEVICE=1 does not start and
    says why.
Exit 77 when parallax-rank or pctl was not built."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxpctl import pctl_cluster, pctl_fail  # noqa: E402

SIM_MB = 512


def run_job(c, data, devices, name):
    jid = c.json("submit", "--data", data, "--dp", 2, "--batch", 4, "--steps", 6,
                 "--layers", 2, "--heads", 2, "--dim", 32, "--seq", 16, "--lr", 1e-3,
                 "--seed", 7, "--no-val", "--devices", devices, "--name", name)["job_id"]
    j = pc.wait_state(c, jid, ("COMPLETED", "FAILED", "CANCELLED"), 240)
    if pc.job_state(j) != "COMPLETED":
        raise AssertionError("job on %s: %s (%s)\nrank 0 log:\n%s" % (
            devices, pc.job_state(j), j.get("reason"), c.logs(jid, 0)[-3000:]))
    return jid, j


def main():
    args = pc.parse_args(sys.argv[1:])
    env = {"PX_SIM_DEVICE": "1", "PX_SIM_DEVICE_MB": str(SIM_MB), "PX_SHM": "0"}
    setup = pctl_cluster(args, "sim", env=env, daemon_args=["--devices", "cpu:2,sim:2"])
    if setup is None:
        return 77
    cl, data, client = setup
    with cl:
        cl.start(client)
        c = client(cl.daemons[0])

        # pctl nodes: every node's sim devices with their memory
        nodes = c.nodes()
        assert len(nodes) == 2, nodes
        for n in nodes:
            devs = {d["name"]: d for d in n["devices"]}
            assert sorted(devs) == ["cpu:0", "cpu:1", "sim:0", "sim:1"], (n["name"], sorted(devs))
            for k in ("sim:0", "sim:1"):
                assert devs[k]["mem_total"] == SIM_MB << 20, devs[k]
                assert devs[k]["mem_used"] == 0, devs[k]
        text = c.run("nodes")
        sim_lines = [l for l in text.splitlines() if l.strip().startswith("sim:")]
        assert len(sim_lines) == 4 and all("/ 0.5 GiB" in l for l in sim_lines), text
        print("pctl nodes: %d sim devices of %d MiB on %d nodes:\n%s"
              % (len(sim_lines), SIM_MB, len(nodes), "\n".join(sim_lines)))

        # bad names at submit, named
        base = ["submit", "--data", data, "--dp", 2, "--batch", 4, "--steps", 2,
                "--layers", 2, "--heads", 2, "--dim", 32, "--seq", 16]
        pctl_fail(c, "--devices gpu:0", base + ["--devices", "gpu:0"], ["gpu:0"], 2)
        pctl_fail(c, "--devices sim:x", base + ["--devices", "sim:x"], ["sim:x", "index"], 2)
        pctl_fail(c, "--devices cuda", base + ["--devices", "cuda"],
                  ["devices='cuda'", "cpu, sim"], 1)
        pctl_fail(c, "--devices sim:5", base + ["--devices", "sim:5"],
                  ["devices='sim:5'", "no node"], 1)

        # dp=2 on sim:0,1 and on cpu: the same losses
        sim_id, sim_job = run_job(c, data, "sim:0,1", "on-sim")
        cpu_id, cpu_job = run_job(c, data, "cpu", "on-cpu")
        sim_devs = sorted(r["device"] for r in sim_job["ranks"])
        cpu_devs = sorted(r["device"] for r in cpu_job["ranks"])
        assert sim_devs == ["sim:0", "sim:1"], sim_devs
        assert all(d.startswith("cpu:") for d in cpu_devs), cpu_devs
        st = c.run("status", sim_id)
        assert any(l.split() == ["devices", "sim:0,1"] for l in st.splitlines()), st
        # the paths each communicator took, as the ranks reported them:
        # host collectives over UCX (PX_SHM=0), the sim job's device
        # buffers through IPC or staging, the cpu job's none
        paths = {}
        for jid, kind in ((sim_id, "sim"), (cpu_id, "cpu")):
            cps = {p["comm"]: p for p in c.json("status", jid)["comm_paths"]}
            assert "world" in cps and "dp" in cps, (kind, cps)
            for p in cps.values():  # a group no collective ran on (edp, dense) lists none
                assert p["size"] == 2 and set(p["host"]) <= {"ucx"}, (kind, p)
            assert cps["world"]["host"] == ["ucx"], (kind, cps["world"])
            dev = cps["dp"]["device"]
            if kind == "sim":
                assert dev and set(dev) <= {"ipc", "stage"}, (kind, cps["dp"])
            else:
                assert all(not p["device"] for p in cps.values()), (kind, cps)
            text = c.run("status", jid)
            lines = [l for l in text.splitlines() if " ranks):" in l]
            assert lines and lines[0].startswith("paths"), text
            want = ", ".join(["host ucx"] * bool(cps["dp"]["host"]) +
                             ["device " + ",".join(dev)] * bool(dev))
            assert any(l.rstrip().endswith(want) for l in lines), (want, lines)
            paths[kind] = "\n".join(lines)
        print("pctl status paths, sim job:\n%s\ncpu job:\n%s" % (paths["sim"], paths["cpu"]))
        ms, mc = c.metrics(sim_id), c.metrics(cpu_id)
        assert len(ms) == 6 and len(mc) == 6, (len(ms), len(mc))
        for a, b in zip(ms, mc):
            for k in ("loss", "grad_norm"):
                assert pc.finite(a[k]) and abs(a[k] - b[k]) <= 1e-5 * abs(b[k]), (k, a, b)
                assert a[k] == b[k], "step %d %s: sim %r cpu %r not bit for bit" % (
                    a["step"], k, a[k], b[k])
        print("dp=2 sim:0,1 vs cpu: %d steps, losses %s equal bit for bit (grad norms too)"
              % (len(ms), ", ".join("%.6f" % m["loss"] for m in ms)))

        # pctl mem: device memory per rank for the sim job, none for cpu
        mem = c.json("mem", sim_id)
        assert len(mem["ranks"]) == 2, mem
        for r in mem["ranks"]:
            dv = r["device"]
            assert dv and dv["total"] == SIM_MB << 20 and 0 < dv["used"] <= dv["total"], r
        assert all(r["device"] is None for r in c.json("mem", cpu_id)["ranks"])
        mtext = c.run("mem", sim_id)
        assert "device-GB" in mtext and "/0.54" in mtext, mtext
        print("pctl mem (sim job):\n%s" % mtext.rstrip())

        # sim:N without PX_SIM_DEVICE=1: the daemon does not start
        e = dict(cl.env)
        e.pop("PX_SIM_DEVICE", None)
        lone = pc.Daemon(args.parallaxd, cl.daemons[0].name + "x", cl.workdir, 1, e)
        lone.extra = ["--devices", "sim:2"]
        code, out = lone.run_once()
        assert code != 0 and "PX_SIM_DEVICE=1" in out and "sim:2" in out, (code, out)
        print("daemon without PX_SIM_DEVICE=1: exit %d: %s" % (
            code, [l for l in out.splitlines() if "PX_SIM_DEVICE" in l][0].strip()))
        codes = cl.stop()
        assert codes == [0, 0], codes
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
