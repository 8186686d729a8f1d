#!/usr/bin/python3
"""Integration: `pctl sample JOB` through two daemons (daemon/sample.c).

A dp=2 job named 'smp' (one rank on each node, 1 device each) trains 20
steps with a checkpoint every 10; then, asking either daemon (one of them
forwards to the coordinator, which hands the run to rank 0's node):
  * `pctl sample smp --tokens 50 --seed 1` prints 50 bytes (and a newline),
    the same twice and through the other daemon; seed 2 another text;
    --temperature 0 twice alike, and --top-k 1 is that greedy text;
  * --checkpoint 10 samples step_10; --checkpoint 7 (none) is NOT_FOUND
    naming step_7;
  * a prompt longer than the block (--seq 32) is cropped, not refused:
    the output starts with it;
  * bad input: an unknown job NOT_FOUND naming it; --top-k 0, --top-k -1,
    --temperature -1, --tokens 0 and --tokens 5000 usage errors (exit 2)
    naming the value; --top-k 300 (past the vocab) INVALID_ARGUMENT from the
    rank naming top_k=300; a running job NOT_FOUND (no final weights yet);
    and the daemon's own INVALID_ARGUMENT for such values sent by another
    client (tokens 0 and 5000, top_k -3, temperature -0.5 and nan);
  * a run past its deadline (timeout_ms 50) is killed: DEADLINE_EXCEEDED;
  * afterwards every device is free and no sample directory is left; a
    daemon removes what a dead predecessor's runs left at its start.
Two daemons, one device each."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.rank or not os.access(args.rank, os.X_OK) or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="sample")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=40000)
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    a, b = cl.daemons
    for d in cl.daemons:
        d.env = cl.env
    g = pc.Grpc(a, args.proto)
    cl.start(lambda daemon: pc.Grpc(daemon, args.proto))
    ok = False

    def pctl(d, *argv):
        return subprocess.run([args.pctl, "--server", d.control] + list(argv),
                              capture_output=True, timeout=180)

    def sample(d, *argv):
        r = pctl(d, "sample", "smp", *argv)
        assert r.returncode == 0, (argv, r.returncode, r.stdout, r.stderr)
        assert r.stdout.endswith(b"\n"), r.stdout
        return r.stdout[:-1]

    def refused(d, argv, rc, *words):
        r = pctl(d, "sample", *argv)
        err = r.stderr.decode(errors="replace")
        assert r.returncode == rc and all(w in err for w in words), \
            (argv, r.returncode, err, words)
        print("refused %s: %s" % (" ".join(argv), err.strip().splitlines()[0]))

    ck = os.path.join(cl.workdir, "ck")
    try:
        r = pctl(b, "submit", "--name", "smp", "--data", data, "--dp", "2", "--layers", "2",
                 "--heads", "2", "--dim", "32", "--seq", "32", "--batch", "4", "--steps", "20",
                 "--lr", "3e-3", "--checkpoint-every", "10", "--checkpoint-dir", ck, "--json")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        job = json.loads(r.stdout)["job_id"]
        pc.wait_state(g, job, ("COMPLETED",), 120)

        one = sample(a, "--tokens", "50", "--seed", "1")
        assert len(one) == 50, (len(one), one)
        assert sample(a, "--tokens", "50", "--seed", "1") == one, "seed 1 twice differs"
        assert sample(b, "--tokens", "50", "--seed", "1") == one, "the other daemon differs"
        two = sample(b, "--tokens", "50", "--seed", "2")
        assert len(two) == 50 and two != one, (one, two)
        print("seed 1: %r (twice, and through both daemons); seed 2: %r" % (one, two))
        greedy = sample(a, "--tokens", "50", "--temperature", "0")
        assert sample(b, "--tokens", "50", "--temperature", "0", "--seed", "9") == greedy
        assert sample(a, "--tokens", "50", "--top-k", "1", "--seed", "5") == greedy
        print("greedy: %r (= top-k 1)" % greedy)
        c10 = sample(a, "--tokens", "20", "--checkpoint", "10", "--seed", "1")
        assert len(c10) == 20, c10
        refused(a, ["smp", "--checkpoint", "7"], 1, "NOT_FOUND", "step_7")
        prompt = b"The licence says that anyone may copy it, " * 2  # 86 bytes > seq 32
        out = sample(b, "--tokens", "10", "--prompt", prompt.decode())
        assert out.startswith(prompt) and len(out) == len(prompt) + 10, out
        r = pctl(a, "sample", "smp", "--tokens", "5", "--json")
        assert r.returncode == 0, (r.returncode, r.stderr)
        js = json.loads(r.stdout)
        assert len(js["bytes"]) == 5 and js["node"] in (a.name, b.name) and \
            js["weights"].endswith("weights.safetensors"), js
        print("--json: ran on %s %s from %s in %.2f s" % (js["node"], js["device"],
                                                          js["weights"], js["seconds"]))

        refused(a, ["no-such-job", "--tokens", "5"], 1, "NOT_FOUND", "no-such-job")
        refused(a, ["smp", "--top-k", "0"], 2, "--top-k", "'0'")
        refused(a, ["smp", "--top-k", "-1"], 2, "--top-k", "'-1'")
        refused(a, ["smp", "--temperature", "-1"], 2, "--temperature", "'-1'")
        refused(a, ["smp", "--tokens", "0"], 2, "--tokens", "'0'")
        refused(a, ["smp", "--tokens", "5000"], 2, "--tokens", "'5000'")
        refused(b, ["smp", "--top-k", "300"], 1, "INVALID_ARGUMENT", "top_k=300")
        # the daemon's own checks, for clients other than pctl
        pb = g.pb
        for fields, word in (({"tokens": 0}, "tokens=0"), ({"tokens": 5000}, "tokens=5000"),
                             ({"tokens": 5, "top_k": -3}, "top_k=-3"),
                             ({"tokens": 5, "temperature": -0.5}, "temperature=-0.5"),
                             ({"tokens": 5, "temperature": float("nan")}, "temperature=nan")):
            try:
                g._call("Sample", pb.SampleRequest(job_id=job, **fields), pb.SampleResponse)
                raise AssertionError("Sample %s was answered" % fields)
            except pc.ClientError as e:
                assert "INVALID_ARGUMENT" in str(e) and word in str(e), (fields, str(e))
                print("daemon refused %s: %s" % (fields, e))
        # the run's deadline: killed, DEADLINE_EXCEEDED, its device freed (checked below)
        try:
            g._call("Sample", pb.SampleRequest(job_id=job, tokens=4000, timeout_ms=50),
                    pb.SampleResponse, timeout=60)
            raise AssertionError("a Sample with a 50 ms deadline was answered")
        except pc.ClientError as e:
            assert "DEADLINE_EXCEEDED" in str(e) and "50 ms" in str(e), str(e)
            print("deadline: %s" % e)

        r = pctl(a, "submit", "--name", "busy", "--data", data, "--layers", "1", "--heads", "2",
                 "--dim", "16", "--seq", "16", "--batch", "2", "--steps", "1000000", "--json")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        busy = json.loads(r.stdout)["job_id"]
        pc.wait_state(g, busy, ("RUNNING",), 60)
        refused(b, ["busy"], 1, "NOT_FOUND", busy, "no final weights")
        g.cancel(busy)
        pc.wait_state(g, busy, ("CANCELLED",), 60)

        def all_free():
            nodes = json.loads(pctl(a, "nodes", "--json").stdout)
            return all(not dev.get("job_id") for n in nodes for dev in n.get("devices", []))
        pc.wait_for(all_free, 30, "every device free after sampling")
        for d in cl.daemons:
            sd = os.path.join(d.state_dir, "samples")
            left = os.listdir(sd) if os.path.isdir(sd) else []
            assert not left, (d.name, left)
        # what a dead daemon's run left in samples/ goes when its successor starts
        stale = os.path.join(b.state_dir, "samples", "1-1")
        b.stop()
        os.makedirs(stale)
        open(os.path.join(stale, "out.bin"), "wb").write(b"x")
        b.start()
        pc.wait_for(lambda: not os.path.exists(stale), 30, "the stale sample run removed")
        print("a previous daemon's sample directory removed at start")
        ok = True
    finally:
        cl.stop()
        if ok:
            cl.cleanup()
        else:
            print(cl.logs())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
