"""A real gRPC client (Debian's python3-grpcio) against a px_rpc server.

usage: /usr/bin/python3 test_rpc_python.py FAKE_CONTROL PARALLAX_PROTO

Starts tests/rpc/fake_control (a px_rpc server implementing Control), builds
Python message classes from proto/parallax.proto with protoc, and checks:
unary OK and error status, server streaming, the health check (SERVING) and
UNIMPLEMENTED for an unknown method. Exit 77 (skip) if grpc or protoc is
missing."""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import grpc
except ImportError:
    print("python grpc not available; skipping")
    sys.exit(77)


def main():
    fake, proto = sys.argv[1], os.path.abspath(sys.argv[2])
    if not shutil.which("protoc"):
        print("protoc not available; skipping")
        return 77
    tmp = tempfile.mkdtemp(prefix="px-rpc-py-")
    subprocess.run(["protoc", "--proto_path=" + os.path.dirname(proto),
                    "--python_out=" + tmp, proto], check=True)
    sys.path.insert(0, tmp)
    import parallax_pb2 as pb

    data = os.path.join(tmp, "data.bin")
    with open(data, "wb") as f:
        f.write(b"\0" * 1024)
    srv = subprocess.Popen([fake, "--step-ms", "5"], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline().split()
        assert line[0] == "port", line
        port = int(line[1])
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(ch).result(timeout=10)

        def unary(method, req, resp_cls):
            return ch.unary_unary("/parallax.v1.Control/" + method,
                                  request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=resp_cls.FromString)(req, timeout=10)

        # Unary with an error status and message.
        try:
            unary("GetJob", pb.GetJobRequest(job_id="nope"), pb.Job)
            raise AssertionError("GetJob of a missing job succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
            assert e.details() == "job 'nope' not found", e.details()

        # Unary OK: submit, then read it back.
        spec = pb.JobSpec(name="py", data_path=data, dp=2, batch=4, steps=12, lr=1e-3, seed=7,
                          model=pb.ModelSpec(layers=2, heads=2, dim=32, seq=16, vocab=256),
                          weight_decay=0.1, min_lr_ratio=0.1)
        resp = unary("SubmitJob", pb.SubmitJobRequest(spec=spec), pb.SubmitJobResponse)
        assert resp.job_id == "job-1", resp
        job = unary("GetJob", pb.GetJobRequest(job_id=resp.job_id), pb.Job)
        assert job.id == "job-1" and job.spec.name == "py" and job.spec.model.dim == 32
        assert len(job.ranks) == 2 and job.ranks[1].device == "cpu:1"

        # Server streaming until the job completes.
        watch = ch.unary_stream("/parallax.v1.Control/WatchJob",
                                request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=pb.JobEvent.FromString)
        steps = [ev.metrics.step for ev in watch(pb.WatchJobRequest(job_id="job-1"), timeout=30)
                 if ev.HasField("metrics") and ev.metrics.step > 0]
        assert steps and steps[-1] == 12, steps
        assert steps == sorted(steps), steps
        job = unary("GetJob", pb.GetJobRequest(job_id="job-1"), pb.Job)
        assert job.state == pb.JOB_COMPLETED and job.step == 12, job
        metrics = unary("GetMetrics", pb.GetMetricsRequest(job_id="job-1"), pb.GetMetricsResponse)
        assert [m.step for m in metrics.steps] == list(range(1, 13))

        # Health check: HealthCheckResponse{status: SERVING} = 08 01.
        raw = ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
        assert raw == b"\x08\x01", raw

        # Health watch: one SERVING, the stream stays open until we cancel.
        watch_h = ch.unary_stream("/grpc.health.v1.Health/Watch")(b"", timeout=30)
        first = next(watch_h)
        assert first == b"\x08\x01", first
        watch_h.cancel()

        # Unknown method.
        try:
            ch.unary_unary("/parallax.v1.Control/Nope")(b"", timeout=10)
            raise AssertionError("unknown method succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()
        ch.close()
        print("python grpcio client against the px_rpc server: ok (%d stream events)" % len(steps))
        return 0
    finally:
        srv.terminate()
        rc = srv.wait(timeout=10)
        assert rc == 0, "fake_control exited %d" % rc
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
