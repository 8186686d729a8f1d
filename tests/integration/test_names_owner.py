#!/usr/bin/python3
"""Integration: job names decided by an owner per name (daemon/jobnames.c)
stay unique when the owner dies, is merely slow, or restarts.

Three daemons a, b, c (2 devices each). A blocker job holds three devices
(its "ranks" sleep and never register), so every 4-rank job submitted
afterwards stays PENDING (or, with c dead, may start on a and b: still
active), holding its name. The
names used are ones whose owner by the rendezvous hash over {a, b, c} is c
(the hash is computed here as in px_jobnames_rank). Then:
  * N submitted through a is held by a; through b it is refused, naming
    a's job (c decides it);
  * c is SIGKILLed: at once, and again once b counts c dead, N through b is
    refused naming a's job (b asks c, gets no answer, the next member
    decides; it inherits the name from c, so it asks every member);
  * a fresh name M of c's goes through b (availability), then through a it
    is refused naming b's job;
  * c restarts: M through a is refused at once (c is new: it asks every
    member), N through b after peer-dead-ms (c decides alone, from what a
    registered with it when it saw c again);
  * c is SIGSTOPped (slow, not dead): a fresh name P of c's goes through a
    after the 2 s owner timeout; on SIGCONT, P through b is refused naming
    a's job."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

M64 = (1 << 64) - 1


def rank(name, member):
    """px_jobnames_rank: FNV-1a 64 of name, 0, member; splitmix64's finaliser."""
    h = 0xcbf29ce484222325
    for b in name.encode() + b"\0" + member.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    h ^= h >> 30
    h = (h * 0xbf58476d1ce4e5b9) & M64
    h ^= h >> 27
    h = (h * 0x94d049bb133111eb) & M64
    return h ^ (h >> 31)


def owned_by(owner, members, prefix):
    for i in range(10000):
        name = "%s-%d" % (prefix, i)
        if max(members, key=lambda m: rank(name, m)) == owner:
            return name
    raise AssertionError("no name of %s found" % owner)


def main():
    args = pc.parse_args(sys.argv[1:])
    cl = pc.Cluster(args.parallaxd, n=3, devices=2, tag="no")
    cl.env["PX_RANK_BIN"] = pc.sleeper_rank(cl.workdir)
    for d in cl.daemons:
        d.env = cl.env
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    a, b, c = cl.daemons
    members = [d.name for d in cl.daemons]
    client = lambda d: pc.Grpc(d, args.proto)  # noqa: E731
    with cl:
        cl.start(client)
        ca, cb = client(a), client(b)
        pc.wait_for(lambda: all(sum(1 for n in x.nodes() if n.get("alive")) == 3
                                for x in (ca, cb, client(c))), 20, "every daemon to see 3")
        blocker = ca.submit(data, dp=3, batch=3, steps=100000, name="blocker")

        def submit(cli, name):
            return cli.submit(data, dp=4, batch=4, steps=10, name=name)

        def refused(cli, name, holder_job, what):
            t0 = time.time()
            try:
                job = submit(cli, name)
            except pc.ClientError as e:
                msg = str(e)
                assert "ALREADY_EXISTS" in msg and holder_job in msg, (what, msg)
                print("%s: refused in %.2f s: %s" % (what, time.time() - t0, msg))
                return
            raise AssertionError("%s: '%s' accepted twice: %s and %s" % (what, name, holder_job,
                                                                        job))
        n = owned_by(c.name, members, "n")
        held = submit(ca, n)
        assert pc.job_state(ca.job(held)) == "PENDING", ca.job(held)
        refused(cb, n, held, "owner c alive")

        c.proc.send_signal(signal.SIGKILL)
        c.proc.wait()
        refused(cb, n, held, "owner c killed, not yet counted dead")
        pc.wait_for(lambda: not any(x.get("alive") for x in cb.nodes() if x["name"] == c.name),
                    20, "b to count c dead")
        refused(cb, n, held, "owner c counted dead")
        m = owned_by(c.name, members, "m")
        held_m = submit(cb, m)
        refused(ca, m, held_m, "fresh name of dead c")

        c.start()
        cc = client(c)
        pc.wait_for(lambda: all(sum(1 for x in y.nodes() if x.get("alive")) == 3
                                for y in (ca, cb, cc)), 30, "every daemon to see c again")
        refused(ca, m, held_m, "owner c restarted")
        time.sleep(int(cl.env["PX_PEER_DEAD_MS"]) / 1000.0 + 0.5)
        # c decides n alone now, from the record a registered when it saw c
        refused(cb, n, held, "owner c restarted, past its peer-dead-ms")

        p = owned_by(c.name, members, "p")
        c.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.time()
            held_p = submit(ca, p)
            print("owner c stopped: '%s' accepted through a in %.2f s" % (p, time.time() - t0))
        finally:
            c.proc.send_signal(signal.SIGCONT)
        refused(cb, p, held_p, "owner c resumed")
        for cli, job in ((ca, held), (cb, held_m), (ca, held_p), (ca, blocker)):
            cli.cancel(job)
        codes = cl.stop()
        assert codes == [0, 0, 0], codes
    print("PASS")


if __name__ == "__main__":
    main()
