#!/usr/bin/python3
"""Integration (issue 16): two submits of one job name to two daemons at
the same instant: exactly one is accepted, the other refused with
ALREADY_EXISTS naming the name, on every try.

Two daemons (2 devices each). A blocker job holds one device (its "rank"
is a script that sleeps and never registers, so it stays STARTING and
costs no CPU), so every 4-rank job submitted afterwards stays PENDING and
is cancelled at once without spawning anything. Each try sends SubmitJob
with a fresh name to both daemons from two gRPC channels back to back
(futures: both requests are on the wire within microseconds, well inside
one round trip between the daemons). Before the reservation step both
daemons asked each other for their jobs, found none and both accepted."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

TRIES = 40


def main():
    args = pc.parse_args(sys.argv[1:])
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="nr",
                    env={"PX_CONNECT_TIMEOUT_MS": "600000"})
    cl.env["PX_RANK_BIN"] = pc.sleeper_rank(cl.workdir)
    for d in cl.daemons:
        d.env = cl.env
    client = lambda d: pc.Grpc(d, args.proto)  # noqa: E731
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    with cl:
        cl.start(client)
        ca, cb = client(cl.daemons[0]), client(cl.daemons[1])
        blocker = ca.submit(data, dp=1, batch=4, steps=100000, name="blocker")
        # each daemon's own peer table: the other alive, its devices known
        # (Cluster.start waited for node a's view only)
        pc.wait_for(lambda: all(sum(1 for n in c.nodes() if n.get("alive")) == 2
                                for c in (ca, cb)), 20, "both daemons to see each other")
        pc.wait_for(lambda: any(dv["job_id"] == blocker for n in cb.nodes()
                                for dv in n["devices"]), 20, "node b to see the blocker's device")
        pb = ca.pb

        def request(name):
            spec = pb.JobSpec(name=name, model=pb.ModelSpec(layers=2, heads=2, dim=32, seq=32,
                                                            vocab=256),
                              data_path=data, dp=4, batch=4, steps=10, lr=1e-3, seed=1)
            return pb.SubmitJobRequest(spec=spec)

        def stub(c):
            return c.channel.unary_unary("/parallax.v1.Control/SubmitJob",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=pb.SubmitJobResponse.FromString)
        sa, sb = stub(ca), stub(cb)
        winners = {"a": 0, "b": 0}
        t0 = time.time()
        for t in range(TRIES):
            name = "race-%d" % t
            fa = sa.future(request(name), timeout=15)
            fb = sb.future(request(name), timeout=15)
            ok, refused = [], []
            for who, f, c in (("a", fa, ca), ("b", fb, cb)):
                try:
                    ok.append((who, f.result().job_id, c))
                except ca.grpc.RpcError as e:
                    assert e.code() == ca.grpc.StatusCode.ALREADY_EXISTS, \
                        "try %d: node %s: %s %s" % (t, who, e.code(), e.details())
                    assert name in e.details(), e.details()
                    refused.append(e.details())
            assert len(ok) == 1, "try %d: %d of 2 submits of '%s' accepted: %s" % (
                t, len(ok), name, [(w, j) for w, j, _ in ok])
            who, job_id, c = ok[0]
            winners[who] += 1
            j = c.job(job_id)
            assert pc.job_state(j) == "PENDING", j
            j = c.cancel(job_id)
            assert pc.job_state(j) == "CANCELLED", j
            if t == 0:
                print("try 0: %s accepted (%s), the other: %s" % (who, job_id, refused[0]))
        print("%d tries, both daemons at once: exactly one accepted each time (a %d, b %d) "
              "in %.1f s" % (TRIES, winners["a"], winners["b"], time.time() - t0))
        ca.cancel(blocker)
        codes = cl.stop()
        assert codes == [0, 0], codes
    print("PASS")


if __name__ == "__main__":
    main()
