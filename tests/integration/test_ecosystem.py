#!/usr/bin/python3
"""Integration (issue 14): validation loss through a daemon, pctl finding
the local daemon, and a complete `status --json`.

One daemon with 2 CPU devices, driven by pctl WITHOUT --server or PX_SERVER
(PX_RUNTIME_DIR points pctl at the daemon's --runtime-dir, where it looks for
control.sock as it looks in /run/parallax by default):
1. `pctl nodes` reaches the daemon through its unix socket; with no socket
   in the runtime directory pctl falls back to 127.0.0.1:7070 (the error
   names it, unless a daemon answers there).
2. `pctl data prepare --val-fraction 0.1` writes x.bin and x_val.bin; a
   ZeRO-2 job (dp 2, grad_accum 2, clip 0.5, checkpoints every 3 steps)
   submitted with --data x.bin and no --val-data validates on x_val.bin
   every 3 steps over 2 batches: `pctl metrics --json` has val_loss after
   steps 3 and 6 only, `pctl status --json` the last one (val_step 6), the
   text status a "val loss" line, `pctl metrics --plot` draws it.
3. `pctl status --json` carries every field of JobSpec, ModelSpec and
   ParallelSpec as parallax.proto declares them (the field list is read
   from the .proto here, not from pctl), with the submitted values.
4. A missing --val-data file and --eval-batches past the validator's range
   are refused at submit,
   naming the value (pipeline layouts evaluate: test_val_layouts.py).
5. The daemon runs with --metrics-listen: its /metrics page counts the
   completed job and the RPCs pctl made (by method and code), and the daemon
   still stops with status 0 (the endpoint's handles are closed cleanly;
   test_prometheus.py scrapes it with a real Prometheus where one is
   installed)."""
import json
import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def proto_fields(proto, message):
    """Field names of `message` in the .proto text, in order."""
    text = open(proto).read()
    m = re.search(r"^message %s \{(.*?)^\}" % message, text, re.S | re.M)
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return re.findall(r"^\s*(?:repeated\s+|optional\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;", body, re.M)


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.rank or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=1, devices=2, tag="eco")
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    (d,) = cl.daemons
    d.env = cl.env
    mport = pc.free_port()
    d.extra = ["--metrics-listen", str(mport)]  # a bare port: loopback
    env = dict(cl.env, PX_RUNTIME_DIR=d.runtime_dir)
    env.pop("PX_SERVER", None)

    def pctl(*a, check=True, e=None):
        r = subprocess.run([args.pctl] + [str(x) for x in a], capture_output=True, text=True,
                           timeout=120, env=e or env)
        if check and r.returncode:
            raise AssertionError("pctl %s: exit %d: %s%s" % (a, r.returncode, r.stderr, r.stdout))
        return r

    class Local:  # Cluster.start's readiness client: pctl through the socket
        def nodes(self):
            return json.loads(pctl("nodes", "--json").stdout)
    with cl:
        cl.start(lambda daemon: Local())
        nodes = json.loads(pctl("nodes", "--json").stdout)
        assert [n["name"] for n in nodes] == [d.name], nodes
        print("pctl without --server reached %s through %s/control.sock" % (d.name, d.runtime_dir))
        empty = os.path.join(cl.workdir, "no-daemon-here")
        os.makedirs(empty)
        r = pctl("--timeout", "2000", "nodes", check=False, e=dict(env, PX_RUNTIME_DIR=empty))
        assert r.returncode == 0 or "127.0.0.1:7070" in r.stderr, r.stderr
        print("no socket: pctl falls back to 127.0.0.1:7070 (%s)" %
              ("a daemon answered there" if r.returncode == 0 else r.stderr.strip()))

        text = os.path.join(cl.workdir, "licenses.txt")
        with open(text, "wb") as f:
            for n in sorted(os.listdir("/usr/share/common-licenses"))[:6]:
                p = os.path.join("/usr/share/common-licenses", n)
                if os.path.isfile(p):
                    f.write(open(p, "rb").read())
        data = os.path.join(cl.workdir, "x.bin")
        pctl("data", "prepare", "--text", text, "--out", data, "--val-fraction", "0.1")
        val = os.path.join(cl.workdir, "x_val.bin")
        assert os.path.exists(val)
        ck = os.path.join(cl.workdir, "ck")
        common = ["--data", data, "--layers", "2", "--heads", "2", "--dim", "32", "--seq", "32"]
        r = pctl("submit", *common, "--val-data", os.path.join(cl.workdir, "nope.bin"),
                 check=False)
        assert r.returncode != 0 and "nope.bin" in r.stderr, (r.returncode, r.stderr)
        # past the shared validator's range, which pctl's parser admits: the
        # daemon answers INVALID_ARGUMENT (counted on the metrics page below)
        r = pctl("submit", *common, "--val-data", val, "--eval-batches", "1000000001",
                 check=False)
        assert r.returncode == 1 and "eval_batches=1000000001" in r.stderr, r.stderr
        print("refused: %s" % r.stderr.strip())

        r = pctl("submit", *common, "--dp", "2", "--zero", "2", "--grad-accum", "2", "--clip",
                 "0.5", "--checkpoint-every", "3", "--checkpoint-dir", ck, "--batch", "8",
                 "--steps", "6", "--eval-every", "3", "--eval-batches", "2", "--name", "eco",
                 "--follow", "--json")
        job = json.loads(r.stdout)
        jid = job["id"]
        st = json.loads(pctl("status", jid, "--json").stdout)
        assert st["state"] == "completed", st["state"]
        steps = json.loads(pctl("metrics", jid, "--json").stdout)
        got = {m["step"]: m["val_loss"] for m in steps if m["val_loss"] is not None}
        assert sorted(got) == [3, 6] and all(pc.finite(v) and v > 0 for v in got.values()), steps
        assert st["val_step"] == 6 and abs(st["val_loss"] - got[6]) < 1e-6, st
        print("validation losses %s; status: %.4f after step %d" % (got, st["val_loss"],
                                                                     st["val_step"]))
        assert "val loss" in pctl("status", jid).stdout
        table = pctl("metrics", jid).stdout
        assert "VAL_LOSS" in table.split("\n")[0], table
        pl = pctl("metrics", jid, "--plot", "--width", "80").stdout
        assert "%s train" % jid in pl and "%s val" % jid in pl, pl
        print(pl)

        spec = st["spec"]
        want = {"": proto_fields(args.proto, "JobSpec"),
                "model": proto_fields(args.proto, "ModelSpec"),
                "parallel": proto_fields(args.proto, "ParallelSpec")}
        for sub, fields in want.items():
            obj = spec[sub] if sub else spec
            missing = [f for f in fields if f not in obj]
            assert not missing, "status --json spec%s lacks %s" % ("." + sub if sub else "",
                                                                   missing)
        expect = {"zero": 2, "grad_accum": 2, "grad_clip": 0.5, "checkpoint_every": 3,
                  "checkpoint_dir": ck, "val_data_path": os.path.realpath(val),
                  "eval_every": 3, "eval_batches": 2, "batch": 8, "steps": 6, "name": "eco"}
        for k, v in expect.items():
            assert spec[k] == v, "spec.%s = %r, submitted %r" % (k, spec[k], v)
        assert spec["model"]["layers"] == 2 and spec["parallel"]["dp"] == 2, spec
        print("status --json carries all %d JobSpec fields (+ %d model, %d parallel)" %
              (len(want[""]), len(want["model"]), len(want["parallel"])))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as r:
            page = r.read().decode()
            ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        for want in ['parallax_jobs{state="completed"} 1',
                     'parallax_rpc_requests_total{service="Control",method="SubmitJob",'
                     'code="INVALID_ARGUMENT"} 1',
                     'parallax_rpc_requests_total{service="Control",method="SubmitJob",'
                     'code="OK"} 1', "# TYPE parallax_rpc_duration_seconds histogram"]:
            assert want in page, "the metrics page lacks %r:\n%s" % (want, page)
        codes = cl.stop()
        assert codes == [0], "parallaxd exited %s after serving metrics" % codes
        print("metrics page ok; the daemon stopped cleanly")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
