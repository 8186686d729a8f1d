#!/usr/bin/python3
"""Load figures for parallaxd's Control service (bench suite, not a test of
correctness alone): one daemon (1 CPU device) holds N_JOBS recorded jobs
(the first sits in rendezvous forever, the rest wait in the FIFO queue, so
the set is stable), then N_CLIENTS concurrent python3-grpcio clients (each
its own channel; threads in PROCS processes, so the Python client is not
the bottleneck of one GIL) each make CALLS calls, alternating ListJobs (all
N_JOBS jobs, 114 KiB for 1,000) and GetJob of a random job. Every answer is checked
(ListJobs: same size as the reference answer; GetJob: the asked id), and
any error fails the run. Prints calls/s, p50/p99/max latency per method.
Usage: load_control.py --parallaxd PATH --proto PATH [--jobs N]
       [--clients N] [--calls N]"""
import argparse
import multiprocessing as mp
import os
import random
import stat
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

PROCS = 4


def client_proc(addr, ids, ref_len, n_threads, calls, barrier, q, pb_dir):
    import grpc
    sys.path.insert(0, pb_dir)
    import parallax_pb2 as pb
    lat = {"ListJobs": [], "GetJob": []}
    errors = []
    lock = threading.Lock()

    def worker(seed):
        rng = random.Random(seed)
        ch = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
        lj = ch.unary_unary("/parallax.v1.Control/ListJobs",
                            request_serializer=lambda m: m, response_deserializer=lambda b: b)
        gj = ch.unary_unary("/parallax.v1.Control/GetJob",
                            request_serializer=lambda m: m, response_deserializer=lambda b: b)
        list_req = pb.ListJobsRequest().SerializeToString()
        mine = {"ListJobs": [], "GetJob": []}
        bad = []
        grpc.channel_ready_future(ch).result(timeout=10)
        barrier.wait()
        for i in range(calls):
            try:
                if i % 2 == 0:
                    t = time.perf_counter()
                    r = lj(list_req, timeout=30)
                    mine["ListJobs"].append(time.perf_counter() - t)
                    if len(r) != ref_len:
                        bad.append("ListJobs answer of %d bytes, expected %d" % (len(r), ref_len))
                else:
                    jid = rng.choice(ids)
                    req = pb.GetJobRequest(job_id=jid).SerializeToString()
                    t = time.perf_counter()
                    r = gj(req, timeout=30)
                    mine["GetJob"].append(time.perf_counter() - t)
                    if pb.Job.FromString(r).id != jid:
                        bad.append("GetJob %s answered another job" % jid)
            except grpc.RpcError as e:
                bad.append("%s: %s" % (e.code().name, e.details()))
        ch.close()
        with lock:
            for k in lat:
                lat[k] += mine[k]
            errors.extend(bad)

    ts = [threading.Thread(target=worker, args=(hash((os.getpid(), k)),)) for k in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put((lat, errors))


def cpu_s(pid):
    """user+system CPU seconds of process `pid` so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallaxd", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--pctl", default="")
    ap.add_argument("--rank", default="")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="load")
    wrapper = os.path.join(cl.workdir, "parallax-rank")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec sleep 600\n")  # never registers: the job stays STARTING
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
    cl.env.update({"PX_RANK_BIN": wrapper, "PX_CONNECT_TIMEOUT_MS": "3600000",
                   "PX_LOG_LEVEL": "warn"})
    d = cl.daemons[0]
    d.env = cl.env
    try:
        cl.start(lambda x: pc.Grpc(x, args.proto))
        g = pc.Grpc(d, args.proto)
        data = os.path.join(cl.workdir, "tok.bin")
        pc.write_llmc_tokens(data, max_tokens=5000)
        t0 = time.time()
        ids = [g.submit(data, dp=1, batch=2, steps=10, name="load-%d" % i)
               for i in range(args.jobs)]
        t_submit = time.time() - t0
        jobs = g.jobs()
        states = {}
        for j in jobs:
            states[pc.job_state(j)] = states.get(pc.job_state(j), 0) + 1
        assert len(jobs) == args.jobs, len(jobs)
        ref = g.channel.unary_unary("/parallax.v1.Control/ListJobs",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=lambda b: b)(g.pb.ListJobsRequest())
        pb_dir = os.path.dirname(sys.modules["parallax_pb2"].__file__)
        print("%d jobs recorded in %.1f s (%.0f SubmitJob/s): %s; ListJobs answer %d KiB"
              % (args.jobs, t_submit, args.jobs / t_submit, states, len(ref) // 1024))
        per = [args.clients // PROCS + (1 if k < args.clients % PROCS else 0) for k in range(PROCS)]
        barrier = mp.Barrier(args.clients + 1)
        q = mp.Queue()
        ps = [mp.Process(target=client_proc, args=(d.control, ids, len(ref), n, args.calls,
                                                     barrier, q, pb_dir)) for n in per if n]
        for p in ps:
            p.start()
        barrier.wait()
        t0 = time.perf_counter()
        c0 = cpu_s(d.proc.pid)
        results = [q.get(timeout=900) for _ in ps]
        wall = time.perf_counter() - t0
        dcpu = cpu_s(d.proc.pid) - c0
        for p in ps:
            p.join()
        lat = {"ListJobs": [], "GetJob": []}
        errors = []
        for l, e in results:
            for k in lat:
                lat[k] += l[k]
            errors += e
        total = sum(len(v) for v in lat.values())
        print("%d clients x %d calls (ListJobs/GetJob alternating) = %d calls in %.1f s: "
              "%.0f calls/s; errors: %d" % (args.clients, args.calls, total, wall, total / wall,
                                            len(errors)))
        print("  parallaxd used %.1f CPU s for them: %.0f calls per daemon CPU second "
              "(the Python clients share the 2 cores)" % (dcpu, total / max(dcpu, 0.01)))
        for k, v in lat.items():
            print("  %-8s n=%5d  p50 %.1f ms  p99 %.1f ms  max %.1f ms"
                  % (k, len(v), 1e3 * pct(v, 50), 1e3 * pct(v, 99), 1e3 * max(v)))
        assert not errors, errors[:5]
        assert total == args.clients * args.calls, total
        assert d.alive()
        codes = cl.stop()
        assert codes == [0], codes
        cl.cleanup()
        return 0
    finally:
        if d.alive():
            d.proc.kill()
            d.proc.wait()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
