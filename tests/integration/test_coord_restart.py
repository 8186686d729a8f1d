#!/usr/bin/python3
"""Integration: a coordinator killed together with its job's ranks (as when
its host dies, or when it is the init of the host's PID namespace) must not
lose a job that has restarts left.

A dp=2 job with --checkpoint-every 200 and --max-restarts 2 runs on two
daemons (coordinator a). Once a checkpoint exists, a's daemon and every rank
of the job are SIGKILLed, then a is started again on the same state. The job
is then FAILED ("coordinator daemon restarted ...") and, like a job whose rank
died, restarted from its newest checkpoint under a new id, which COMPLETEs
all its steps; the history (both jobs, the reason naming the new id) is in
a's store.
Exit 77 when parallax-rank was not built."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

STEPS = 20000


def main():
    args = pc.parse_args(sys.argv[1:])
    if pc.rank_missing(args):
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="coordrs")
    a, b = cl.daemons
    client = lambda d: pc.Grpc(d, args.proto)  # noqa: E731
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    ck = os.path.join(cl.workdir, "ckpt")
    hf = os.path.join(cl.workdir, "hf")
    # the model's initial weights as a Hugging Face GPT-2 (no step taken)
    subprocess.run([args.rank, "--layers", "1", "--heads", "2", "--dim", "16", "--seq", "16",
                    "--batch", "4", "--steps", "1", "--data", data, "--export-init",
                    os.path.join(cl.workdir, "init"), "--export-hf", hf],
                   check=True, env=dict(os.environ, PX_WORLD_SIZE="1"),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    with cl:
        cl.start(client)
        g = client(a)
        job_id = g.submit(data, dp=2, batch=4, steps=STEPS, layers=1, heads=2, dim=16, seq=16,
                          name="coord-restart", checkpoint_every=200, checkpoint_dir=ck,
                          max_restarts=2, init_from=hf)
        assert g.job(job_id)["spec"]["init_from"] == hf

        def checkpointed():
            j = g.job(job_id)
            st = pc.job_state(j)
            assert st in ("PENDING", "STARTING", "RUNNING"), j
            return st == "RUNNING" and any(
                os.path.exists(os.path.join(ck, e, "meta.json"))
                for e in (os.listdir(ck) if os.path.isdir(ck) else []))
        pc.wait_for(checkpointed, 120, "job %s to write a checkpoint" % job_id)
        # the spec's init_from reached the rank through the daemon
        assert "init: parameters from the Hugging Face GPT-2 %s/model.safetensors" % hf in \
            g.logs(job_id, 0), g.logs(job_id, 0)[-2000:]
        step = g.job(job_id).get("step", 0)
        assert step < STEPS, step
        ranks = pc.rank_pids(job_id)
        assert len(ranks) == 2, ranks
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pc.wait_for(lambda: not pc.rank_pids(job_id), 20, "the killed ranks to be gone")
        a.start()
        pc.wait_all_alive(cl.daemons, client(a), 30, "a back and both daemons alive")
        g = client(a)
        j = g.job(job_id)
        reason = j.get("reason", "")
        assert pc.job_state(j) == "FAILED" and "coordinator daemon restarted" in reason, j
        assert "restarted as " in reason, reason
        new_id = reason.split("restarted as ", 1)[1].split()[0]
        done = pc.wait_state(g, new_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(done) == "COMPLETED", (done, cl.logs())
        assert done["step"] == STEPS, done
        spec = done["spec"]
        assert spec["restarted_from"] == job_id and spec["restart"] == 1, spec
        assert spec["resume_dir"].startswith(ck + "/step_"), spec
        assert not spec.get("init_from"), spec  # a run starts from one of them
        ids = {x["id"]: pc.job_state(x) for x in g.jobs()}
        assert ids.get(job_id) == "FAILED" and ids.get(new_id) == "COMPLETED", ids
        assert not pc.rank_pids(new_id)
        print("coordinator %s SIGKILLed with the ranks of %s at step %d; started again: %s "
              "FAILED (%s); %s resumed from %s and COMPLETED %d steps"
              % (a.name, job_id, step, job_id, reason, new_id, spec["resume_dir"], STEPS))
        codes = cl.stop()
        assert codes == [0, 0], (codes, cl.logs())
    return 0


if __name__ == "__main__":
    sys.exit(main())
