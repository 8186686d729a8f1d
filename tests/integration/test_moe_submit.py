#!/usr/bin/python3
"""Integration: the mixture of experts through pctl and two daemons of 2 cpu
devices each (issue 11).

At submit (pctl exits 1, the daemon's INVALID_ARGUMENT names the values):
  * 6 experts with ep 4 (dp 4): names 6 and 4;
  * top-k 2 with 1 expert;
  * ep 4 with dp 2: ep does not divide dp x cp.
A job of 4 experts, top-2, capacity factor 1.0, dp 2 x ep 2 over both
daemons (the flags travel pctl -> JobSpec.moe -> the ranks' spec file)
completes, and `pctl status` shows the MoE settings and the choices each
expert received and dropped in the last step: per layer and step the kept
and dropped choices add up to tokens x top-k (2 MoE layers x 64 tokens x
2), and `--json` carries the same numbers; `pctl mem` shows each rank's
parameter and optimizer bytes equal to the plan's, experts included, and
to `pctl plan --experts 4 --ep 2`'s.
Exit 77 when parallax-rank or pctl was not built."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxpctl import pctl_cluster, pctl_fail  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    setup = pctl_cluster(args, "moe")
    if setup is None:
        return 77
    cl, data, client = setup
    small = ["--layers", 2, "--heads", 2, "--dim", 32, "--seq", 16, "--lr", 1e-3]
    with cl:
        cl.start(client)
        c = client(cl.daemons[0])
        pctl_fail(c, "6 experts on ep 4", ["submit", "--data", data, "--dp", 4, "--ep", 4,
                                           "--experts", 6, "--batch", 8] + small,
                  ["INVALID_ARGUMENT", "experts=6 is not divisible by ep=4"])
        pctl_fail(c, "top-k > experts", ["submit", "--data", data, "--experts", 1,
                                         "--top-k", 2, "--batch", 4] + small,
                  ["INVALID_ARGUMENT", "top_k=2 is larger than experts=1"])
        pctl_fail(c, "ep not dividing dp", ["submit", "--data", data, "--dp", 2, "--ep", 4,
                                            "--experts", 8, "--batch", 4] + small,
                  ["INVALID_ARGUMENT", "ep=4 does not divide dp x cp = 2"])
        assert c.jobs() == [], c.jobs()
        job = c.json("submit", "--data", data, "--dp", 2, "--ep", 2, "--experts", 4,
                     "--top-k", 2, "--capacity-factor", 1.0, "--batch", 8, "--steps", 6,
                     "--name", "moe", *small)["job_id"]
        done = pc.wait_state(c, job, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert pc.job_state(done) == "COMPLETED", (done, cl.logs())
        text = c.run("status", job)
        print(text)
        assert "moe          4 experts, top-2, every 1 layer(s), capacity" in text, text
        m = re.search(r"experts +4 over ep 2, top-2; step (\d+), choices received/dropped per "
                      r"expert: 0: (\d+)/(\d+) 1: (\d+)/(\d+) 2: (\d+)/(\d+) 3: (\d+)/(\d+)", text)
        assert m, text
        step, nums = int(m.group(1)), [int(x) for x in m.groups()[1:]]
        # 2 MoE layers x (8 sequences x 16 tokens) x top-2 choices
        assert step == 6 and sum(nums) == 2 * 128 * 2, (step, nums)
        # capacity ceil(128 x 2 / 4 x 1.0) = 64 per expert and layer
        assert all(r <= 2 * 64 for r in nums[0::2]), nums
        js = c.json("status", job)
        assert js["experts"]["received"] == nums[0::2] and \
            js["experts"]["dropped"] == nums[1::2], js.get("experts")
        print("moe job: received %s dropped %s" % (nums[0::2], nums[1::2]))
        # pctl mem: each rank's parameters and optimizer state are the plan's,
        # dense units plus the routers and its 2 of the 4 experts (pctl plan)
        plan = c.json("plan", "--dp", 2, "--ep", 2, "--experts", 4, "--batch", 8, "--zero", 0,
                      "--precision", "fp32", "--layers", 2, "--heads", 2, "--dim", 32,
                      "--seq", 16)
        want = plan["stages"][0]
        mem = c.json("mem", job)
        for r in mem["ranks"]:
            cats = r["categories"]
            assert cats["params"]["peak"] == cats["params"]["plan"] == want["params_bytes"] and \
                cats["optimizer"]["peak"] == want["optimizer_bytes"], (r, want)
        print("pctl mem: params %d B per rank (pctl plan %d B, %d of them the experts')" % (
            mem["ranks"][0]["categories"]["params"]["peak"], want["params_bytes"],
            4 * plan["moe"]["rank_params"]))
    print("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
