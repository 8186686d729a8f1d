#!/usr/bin/python3
"""Writes the seed corpus of fuzz/ (run from the repository root):
fuzz/corpus/messages/<name> = one selector byte (index into fuzz_messages.c's
descriptor table) + a valid encoding of that message; fuzz/corpus/config/* =
example config files (the shipped one, every key, and broken ones)."""
import os, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tmp = tempfile.mkdtemp()
subprocess.check_call(["protoc", "--proto_path=" + os.path.join(root, "proto"),
                       "--python_out=" + tmp, "parallax.proto"])
sys.path.insert(0, tmp)
import parallax_pb2 as pb  # noqa: E402

spec = pb.JobSpec(name="demo", model=pb.ModelSpec(layers=2, heads=2, dim=64, seq=32),
                  data_path="/tmp/book.bin", dp=4, batch=8, steps=10, lr=2e-3, seed=7)
job = pb.Job(id="a-1", spec=spec, state=pb.JOB_RUNNING, reason="", step=3, loss=2.5,
             coordinator="a", ranks=[pb.RankInfo(rank=0, node="a", device="cpu:0", pid=9)])
node = pb.NodeInfo(name="b", control_addr="127.0.0.1:7070", peer_addr="127.0.0.1:7071",
                   devices=[pb.Device(name="cpu:0", job_id="a-1"), pb.Device(name="cpu:1"),
                            pb.Device(name="cuda:0/1", memory_bytes=70 << 30,
                                      blocked="pid 77 (python3), not a rank of this node, "
                                              "holds GPU cuda:0")],
                   gpus=[pb.GpuStats(device="cuda:0", model="NVIDIA H200", memory_total=140 << 30,
                                     memory_used=3 << 30, utilization=0.5, power_watts=300,
                                     temperature_celsius=55, sampled_ms=1, pids=[76, 77],
                                     foreign_pids=[77])],
                   alive=True, version="0.1.0")
metrics = pb.StepMetrics(step=3, loss=2.5, grad_norm=1.0, lr=1e-3, tokens_per_second=1e4)
msgs = [  # same order as descs[] in fuzz_messages.c
    pb.SubmitJobRequest(spec=spec), pb.GetJobRequest(job_id="a-1"), pb.ListJobsRequest(),
    pb.CancelJobRequest(job_id="a-1"), pb.WatchJobRequest(job_id="b-2"), pb.ListNodesRequest(),
    pb.GetMetricsRequest(job_id="a-1"), pb.GetLogsRequest(job_id="a-1", rank=1, tail_bytes=100),
    pb.HeartbeatRequest(node=node),
    pb.LaunchRanksRequest(job_id="a-1", spec=spec, world_size=4,
                          coordinator_peer_addr="127.0.0.1:7071", coordinator="a",
                          ranks=[pb.RankAssignment(rank=2, device="cpu:0")]),
    pb.StopRanksRequest(job_id="a-1", reason="cancelled"),
    pb.RankExitedRequest(job_id="a-1", rank=1, node="b", exit_code=-9, detail="killed"),
    pb.RegisterRankRequest(job_id="a-1", rank=1, node="b", ucx_address=b"\x01\x02\x03", pid=5),
    pb.ReportProgressRequest(job_id="a-1", rank=0, metrics=metrics),
    job,
    pb.ListJobsResponse(jobs=[job, job], unanswered=[
        pb.UnansweredNode(node="c", reason="DOWN: not heard from for 4.2 s")]),
    pb.GetMetricsResponse(steps=[metrics]), pb.GetLogsResponse(text=b"step 1 loss 2.5\n"),
    pb.HeartbeatResponse(node=node, members=[pb.Member(name="c", peer_addr="127.0.0.1:7075")]),
    pb.LaunchRanksResponse(ranks=[pb.RankInfo(rank=2, node="b", device="cpu:0", pid=4)]),
    pb.ListNodesResponse(nodes=[node]), pb.SubmitJobResponse(job_id="a-1"), spec,
    pb.GetMemoryRequest(job_id="a-1"), pb.ReserveNameRequest(name="demo", node="b"),
    pb.GetMemoryResponse(job_id="a-1", zero=1, dp=4),
    pb.SampleRequest(job_id="a-1", prompt=b"To be", tokens=50, temperature=0.8, top_k=40,
                     seed=1, timeout_ms=120000, spec=spec, weights="/tmp/w.safetensors"),
    pb.SampleResponse(text=b"\nor not", node="a", device="cpu:0", weights="/tmp/w.safetensors",
                      seconds=0.5),
    pb.SetNodeStateRequest(node="b", action=pb.NODE_DRAIN),
    pb.NodeInfo(name="b", devices=[pb.Device(name="cpu:0", job_id="a-1")], alive=True,
                draining=True, state="DRAINING"),
]
out = os.path.join(root, "fuzz", "corpus", "messages")
for i, m in enumerate(msgs):
    with open(os.path.join(out, "%02d-%s" % (i, type(m).__name__)), "wb") as f:
        f.write(bytes([i]) + m.SerializeToString())

conf = os.path.join(root, "fuzz", "corpus", "config")
with open(os.path.join(root, "systemd", "parallaxd.conf"), "rb") as f:
    shipped = f.read()
files = {
    "shipped.conf": shipped,
    "all-keys.conf": b"[parallaxd]\nname = n1\nlisten = 127.0.0.1:7070\npeer-listen = 0.0.0.0:7071\n"
                     b"state-dir = /var/lib/parallax\nruntime-dir = /run/parallax\ndevices = cpu:4\n"
                     b"peers = b:7071, c:7071\nheartbeat-ms = 500\npeer-dead-ms = 5000\n"
                     b"collective-timeout-ms = 30000\nkill-grace-ms = 1000\nlog-level = debug\n"
                     b"token-file = /etc/parallax/token\ncontrol-group = parallax\ncontrol-remote = no\n",
    "unknown-key.conf": b"[parallaxd]\ndevices = cpu:2\nbogus = 1\n",
    "bad-values.conf": b"devices = gpu:1\nheartbeat-ms = -5\nlog-level = loud\n",
    "syntax.conf": b"[unterminated\nkey without equals\n; comment\n",
    # GPU-only nodes (no cpu devices), and a signed index, which is refused
    "gpu-only.conf": b"[parallaxd]\nname = g1\ndevices = cuda:1,3\n",
    "gpu-all.conf": b"[parallaxd]\ndevices = cuda\n",
    "gpu-signed.conf": b"[parallaxd]\ndevices = cuda:+1\n",
    # a GPU shared by 4 ranks, and a share out of range
    "gpu-share.conf": b"[parallaxd]\ndevices = cuda\ngpu-share = 4\n",
    "gpu-share-bad.conf": b"[parallaxd]\ndevices = cuda:0\ngpu-share = 65\n",
}
for name, text in files.items():
    with open(os.path.join(conf, name), "wb") as f:
        f.write(text)
print("corpus: %d messages, %d configs" % (len(msgs), len(files)))
