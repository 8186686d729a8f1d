"""pctl end to end against tests/rpc/fake_control (no parallaxd needed).

usage: python3 test_pctl.py PCTL FAKE_CONTROL

Checks: `data prepare` output byte for byte (and its errors), usage errors
exit 2 naming the flag, an unreachable daemon exits 1 with a clear message
within the deadline, and every Control command (submit, --follow, watch,
list, status, metrics, logs, cancel, nodes; --json) against the fake
service, including a failing job, a stream that breaks (polling fallback),
RPC errors in the `pctl: <command>: <STATUS>: <message>` form, PX_SERVER and
a unix socket."""
import json
import math
import re
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

PCTL = FAKE = None
failures = 0


def check(cond, what):
    global failures
    if cond:
        print("ok   " + what)
    else:
        failures += 1
        print("FAIL " + what)


def pctl(*args, env=None, timeout=60):
    e = dict(os.environ)
    e.pop("PX_SERVER", None)
    if env:
        e.update(env)
    p = subprocess.run([PCTL] + list(args), capture_output=True, text=True, env=e,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def token_file(data):
    header = struct.pack("<256i", *([20240520, 1, len(data)] + [0] * 253))
    return header + b"".join(struct.pack("<H", b) for b in data)


def test_data_prepare(tmp):
    text = "To be, or not to be: that is the question.\n\u00e9t\u00e9\n".encode("utf-8")
    src = os.path.join(tmp, "in.txt")
    with open(src, "wb") as f:
        f.write(text)
    out = os.path.join(tmp, "tok.bin")
    rc, so, se = pctl("data", "prepare", "--text", src, "--out", out)
    check(rc == 0, "data prepare exits 0")
    with open(out, "rb") as f:
        got = f.read()
    check(got == token_file(text), "data prepare output is byte-exact (%d tokens)" % len(text))

    rc, so, se = pctl("data", "prepare", "--text", src, "--out", out, "--val-fraction", "0.25")
    nval = int(len(text) * 0.25)
    val = os.path.join(tmp, "tok_val.bin")
    with open(out, "rb") as f:
        got_train = f.read()
    with open(val, "rb") as f:
        got_val = f.read()
    check(rc == 0 and got_train == token_file(text[:len(text) - nval]) and
          got_val == token_file(text[len(text) - nval:]),
          "--val-fraction 0.25 splits %d/%d tokens byte-exact" % (len(text) - nval, nval))
    check("tok_val.bin" in so, "data prepare names the validation file")

    rc, so, se = pctl("data", "prepare", "--text", os.path.join(tmp, "missing.txt"), "--out", out)
    check(rc == 1 and "cannot open --text" in se and "missing.txt" in se, "missing input: exit 1, clear error")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    rc, so, se = pctl("data", "prepare", "--text", empty, "--out", os.path.join(tmp, "e.bin"))
    check(rc == 1 and "empty" in se and not os.path.exists(os.path.join(tmp, "e.bin")),
          "empty input: exit 1, no output file")
    rc, so, se = pctl("data", "prepare", "--out", out)
    check(rc == 2 and "--text" in se and "usage:" in se, "data prepare without --text: exit 2")
    rc, so, se = pctl("data", "prepare", "--text", src, "--out", out, "--val-fraction", "1.5")
    check(rc == 2 and "--val-fraction" in se and "1.5" in se, "bad --val-fraction: exit 2")
    return out


def test_usage(data):
    cases = [
        (["submit", "--data", data, "--layers", "abc"], ["--layers", "abc", "usage: pctl submit"]),
        (["submit", "--data", data, "--lr", "-1"], ["--lr", "-1"]),
        (["submit", "--data", data, "--batch", "10", "--dp", "4"], ["--batch", "--dp"]),
        (["submit", "--layers", "2"], ["--data"]),
        (["submit", "--data", "/nonexistent/x.bin"], ["--data", "/nonexistent/x.bin"]),
        (["submit", "--data", data, "--bogus"], ["--bogus"]),
        # --grad-clip is an alias of --clip (parallax-rank's name), not unknown
        (["submit", "--data", data, "--grad-clip", "x"], ["--clip", "'x'"]),
        (["status"], ["missing JOB", "usage: pctl status"]),
        (["logs", "j", "--tail", "x"], ["--tail"]),
        (["frobnicate"], ["unknown command", "frobnicate"]),
        (["--timeout", "0", "list"], ["--timeout"]),
        ([], ["no command"]),
    ]
    for args, needles in cases:
        rc, so, se = pctl(*args)
        check(rc == 2 and all(n in se for n in needles),
              "usage error exit 2: pctl %s" % " ".join(args))
    rc, so, se = pctl("--help")
    check(rc == 0 and "submit" in so and "data" in so, "pctl --help")
    rc, so, se = pctl("submit", "--help")
    check(rc == 0 and "--min-lr-ratio" in so and "--follow" in so, "pctl submit --help")
    # every flag of the synopsis is described below it (named in a description line)
    synopsis, _, described = so.partition("\n\n")
    undescribed = sorted(f for f in set(re.findall(r"--[a-z][a-z-]*", synopsis))
                         if f not in re.findall(r"--[a-z][a-z-]*", described))
    check(not undescribed, "pctl submit --help describes every flag (missing: %s)"
          % " ".join(undescribed))


def test_unreachable():
    t0 = time.time()
    rc, so, se = pctl("--server", "127.0.0.1:1", "list")
    dt = time.time() - t0
    check(rc == 1 and "cannot reach parallaxd at 127.0.0.1:1" in se and dt < 7,
          "unreachable TCP daemon: exit 1, clear message (%.1fs)" % dt)
    # A port that accepts TCP connections but never speaks HTTP/2: the
    # deadline passes with no connection made.
    import socket
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)
    maddr = "127.0.0.1:%d" % mute.getsockname()[1]
    t0 = time.time()
    rc, so, se = pctl("--server", maddr, "--timeout", "1000", "nodes")
    dt = time.time() - t0
    mute.close()
    check(rc == 1 and ("cannot reach parallaxd at " + maddr) in se and dt < 4,
          "silent daemon: exit 1 after the deadline with 'cannot reach' (%.1fs)" % dt)
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)
    maddr = "127.0.0.1:%d" % mute.getsockname()[1]
    t0 = time.time()
    rc, so, se = pctl("--server", maddr, "--timeout", "1000", "watch", "job-1")
    dt = time.time() - t0
    mute.close()
    check(rc == 1 and ("cannot reach parallaxd at " + maddr) in se and dt < 4,
          "watch against a silent daemon does not hang (%.1fs)" % dt)
    rc, so, se = pctl("--server", "127.0.0.1:1", "watch", "job-1")
    check(rc == 1 and "pctl: watch: cannot reach parallaxd at 127.0.0.1:1" in se,
          "watch with no daemon: exit 1, clear message")
    rc, so, se = pctl("status", "x", env={"PX_SERVER": "unix:/nonexistent/px.sock"})
    check(rc == 1 and "cannot reach parallaxd at unix:/nonexistent/px.sock" in se,
          "unreachable unix socket via PX_SERVER")


def start_fake(*args):
    p = subprocess.Popen([FAKE] + list(args), stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    assert line and line[0] == "port", line
    return p, int(line[1])


def expected_loss(s):
    return math.log(256.0) * math.exp(-s / 150.0) + 1.5 * (1 - math.exp(-s / 150.0))


def test_control(data, tmp):
    srv, port = start_fake("--step-ms", "10")
    addr = "127.0.0.1:%d" % port
    try:
        rc, so, se = pctl("--server", addr, "nodes", "--json")
        nodes = json.loads(so) if rc == 0 else []
        check(rc == 0 and len(nodes) == 1 and nodes[0]["alive"] is True and
              nodes[0]["devices_total"] == 8 and nodes[0]["devices_free"] == 8,
              "nodes --json")
        rc, so, se = pctl("--server", addr, "nodes")
        check(rc == 0 and "fake" in so and "8/8" in so, "nodes table")

        # submit --follow, not a TTY: plain progress lines every 10 steps.
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--name", "t1",
                          "--steps", "30", "--dp", "2", "--batch", "4", "--layers", "2",
                          "--dim", "64", "--seq", "32", "--follow")
        lines = so.splitlines()
        # the fake job moves on every 10 ms: under load the first state seen
        # may already be a later one
        check(rc == 0 and lines[0] == "job-1" and
              lines[1] in ("pending", "starting", "running"),
              "submit --follow prints the job id, then the state")
        check(any(l.startswith("step 10/30") for l in lines) and
              any(l.startswith("step 20/30") for l in lines) and
              "\r" not in so, "plain progress lines every 10 steps without a TTY")
        check(lines[-1].startswith("job job-1 completed: step 30/30, loss %.4f" % expected_loss(30)),
              "final line: completed, loss (%s)" % lines[-1])

        rc, so, se = pctl("--server", addr, "status", "job-1", "--json")
        j = json.loads(so) if rc == 0 else {}
        check(rc == 0 and j["id"] == "job-1" and j["name"] == "t1" and j["state"] == "completed" and
              j["step"] == 30 and j["steps"] == 30 and len(j["ranks"]) == 2 and
              abs(j["loss"] - expected_loss(30)) < 1e-5 and j["reason"] == "" and
              j["spec"]["data_path"] == os.path.realpath(data) and j["spec"]["dim"] == 64 and
              j["spec"]["weight_decay"] == 0.1 and j["spec"]["min_lr_ratio"] == 0.1 and
              j["spec"]["lr"] == 0.002 and j["spec"]["seed"] == 1337 and
              j["spec"]["heads"] == 4 and j["created_ms"] > 0 and "grad_norm" in j and "lr" in j,
              "status --json has the job, spec defaults and realpath data")
        rc, so, se = pctl("--server", addr, "status", "job-1")
        check(rc == 0 and "completed" in so and "ranks:" in so and "cpu:1" in so,
              "status (human) with the ranks table")
        check("\nprecision    fp32\n" in so, "status shows the default precision, fp32")

        rc, so, se = pctl("--server", addr, "metrics", "job-1", "--json")
        m = json.loads(so) if rc == 0 else []
        check(rc == 0 and [x["step"] for x in m] == list(range(1, 31)) and
              all(abs(x["loss"] - expected_loss(x["step"])) < 1e-5 for x in m) and
              all(set(x) >= {"step", "loss", "grad_norm", "lr", "tokens_per_second"} for x in m),
              "metrics --json: 30 steps with the reported losses")
        rc, so, se = pctl("--server", addr, "metrics", "job-1")
        check(rc == 0 and len(so.splitlines()) == 31, "metrics table")

        rc, so, se = pctl("--server", addr, "logs", "job-1", "--rank", "1", "--tail", "3")
        ll = so.splitlines()
        check(rc == 0 and len(ll) == 3 and ll[-1].startswith("rank 1: step 30 "),
              "logs --rank 1 --tail 3")
        rc, so, se = pctl("--server", addr, "logs", "job-1", "--rank", "5")
        check(rc == 1 and se.startswith("pctl: logs: INVALID_ARGUMENT: rank 5 out of range"),
              "logs of a bad rank: RPC error format")

        # A failing job: exit 1, state and reason shown.
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--name", "fail-me",
                          "--steps", "20", "--follow")
        check(rc == 1 and "job job-2 failed" in so and "rank 1 exited with code 1" in so,
              "submit --follow of a failing job exits 1 with the reason")

        # The watch stream breaks after 3 events: pctl polls GetJob to the end.
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--name", "break-stream",
                          "--steps", "40", "--follow", "--json")
        j = json.loads(so) if rc == 0 else {}
        check(rc == 0 and "polling" in se and j.get("state") == "completed" and j.get("step") == 40,
              "broken watch stream falls back to polling (--json final job)")

        # Cancel a long job via PX_SERVER; watch then reports cancelled, exit 1.
        rc, so, se = pctl("submit", "--data", data, "--name", "long", "--steps", "100000",
                          "--json", env={"PX_SERVER": addr})
        jid = json.loads(so)["job_id"] if rc == 0 else "?"
        check(rc == 0 and jid == "job-4", "submit --json via PX_SERVER")
        rc, so, se = pctl("--server", addr, "nodes", "--json")
        check(rc == 0 and json.loads(so)[0]["devices_free"] == 7, "a running job holds a device")
        rc, so, se = pctl("--server", addr, "cancel", jid, "--json")
        j = json.loads(so) if rc == 0 else {}
        check(rc == 0 and j.get("state") == "cancelled" and j.get("reason") == "cancelled by user",
              "cancel --json")
        rc, so, se = pctl("--server", addr, "cancel", jid)
        check(rc == 1 and se.strip() == "pctl: cancel: FAILED_PRECONDITION: job job-4 already ended",
              "second cancel: RPC error format (%s)" % se.strip())
        rc, so, se = pctl("--server", addr, "watch", jid)
        check(rc == 1 and "job job-4 cancelled" in so, "watch of a cancelled job exits 1")

        rc, so, se = pctl("--server", addr, "list", "--json")
        lst = json.loads(so) if rc == 0 else []
        check(rc == 0 and [x["id"] for x in lst] == ["job-1", "job-2", "job-3", "job-4"] and
              [x["state"] for x in lst] == ["completed", "failed", "completed", "cancelled"],
              "list --json")
        rc, so, se = pctl("--server", addr, "list")
        check(rc == 0 and so.splitlines()[0].split()[:3] == ["ID", "NAME", "STATE"] and
              "30/30" in so and "fail-me" in so, "list table")

        rc, so, se = pctl("--server", addr, "watch", "nope")
        check(rc == 1 and se.strip() == "pctl: watch: NOT_FOUND: job 'nope' not found",
              "watch of a missing job: RPC error format, no polling")
        rc, so, se = pctl("--server", addr, "status", "nope")
        check(rc == 1 and se.strip() == "pctl: status: NOT_FOUND: job 'nope' not found",
              "status of a missing job: RPC error format")
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--dim", "130")
        check(rc == 1 and se.startswith("pctl: submit: INVALID_ARGUMENT: dim 130 is not divisible by heads 4"),
              "daemon-side validation error is shown")
        # issue 12: bf16 is accepted and shown; an unknown precision is named
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--name", "bf16",
                          "--steps", "10", "--precision", "bf16", "--json")
        jid = json.loads(so)["job_id"] if rc == 0 else "?"
        rc2, so2, se2 = pctl("--server", addr, "status", jid)
        check(rc == 0 and rc2 == 0 and
              "\nprecision    bf16 (bf16 GEMM and attention operands, fp32 elsewhere)\n" in so2,
              "submit --precision bf16 accepted, status shows it (%s)" % se.strip())
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--precision", "fp16")
        check(rc == 2 and "'fp16'" in se, "submit --precision fp16: usage error naming it")
        rc, so, se = pctl("--server", addr, "submit", "--data", data, "--dp", "16", "--batch", "16")
        check(rc == 1 and se.startswith("pctl: submit: UNAVAILABLE: dp 16 needs more") and
              "cannot reach" not in se, "UNAVAILABLE from a daemon is not 'cannot reach'")
    finally:
        srv.terminate()
        check(srv.wait(timeout=10) == 0, "fake_control stops cleanly")

    # Unix socket.
    sock = os.path.join(tmp, "ctl.sock")
    srv, port = start_fake("--listen", "unix:" + sock)
    try:
        mode = os.stat(sock).st_mode & 0o777
        rc, so, se = pctl("--server", "unix:" + sock, "nodes", "--json")
        check(rc == 0 and json.loads(so)[0]["name"] == "fake" and mode == 0o660,
              "pctl over unix:%s (socket mode %o)" % (sock, mode))
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def main():
    global PCTL, FAKE
    PCTL, FAKE = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="px-pctl-")
    try:
        data = test_data_prepare(tmp)
        test_usage(data)
        test_unreachable()
        test_control(data, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
