#!/usr/bin/python3
"""Integration (issue 14): parallaxd's Prometheus endpoint, scraped for real.

One daemon (2 CPU devices, and a simulated device that a fake NVML,
tests/integration/fake_nvml.c, shows as a GPU) with --metrics-listen on a
free loopback port runs a dp=2 job with a validation file (100,000 steps: cancelled once
Prometheus holds its series, so no machine is too fast for the scrapes).
Debian's `prometheus` server, started here with a scrape config pointing at the daemon (1 s interval,
honor_labels so the metrics' own `job` label, the parallax job id, is kept),
scrapes it while the job runs. Checks:
  * the page passes `promtool check metrics` (format and naming lint);
  * it has the families the issue lists, with samples for the running job
    (step, loss, validation loss, tokens/s, step time), devices busy with the
    job, RPC counters and a duration histogram for Control calls, and the
    GPU's telemetry (memory, utilization, power, temperature, processes)
    labelled node and device;
  * Prometheus's HTTP API (/api/v1/query_range) returns the job's loss series
    with several samples, each equal to a loss the job reported (pctl
    metrics), its validation-loss series, and the GPU's utilization and
    memory series with the fake NVML's figures;
  * GET / answers 404, POST 405, and the daemon still stops cleanly.
Without prometheus / promtool (deploy/test.sh installs Debian's `prometheus`
package; deploy/setup.sh does not) the test is skipped (77)."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def main():
    args = pc.parse_args(sys.argv[1:])
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not promtool:
        print("SKIP: Debian's prometheus package is not installed (prometheus and promtool "
              "binaries; deploy/test.sh installs it)")
        return 77
    if not args.rank or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    fake_dir = os.environ.get("PX_TEST_FAKE_NVML_DIR", "")
    if not os.path.exists(os.path.join(fake_dir, "libnvidia-ml.so.1")):
        print("SKIP: the fake NVML (tests/integration/fake_nvml.c) is not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=1, devices=2, tag="prom")
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    # the sim device, which the job (on the cpu devices) leaves alone, as
    # the fake NVML's GPU 0 (a line of fake_nvml.c's script)
    nvml_file = os.path.join(cl.workdir, "nvml.txt")
    with open(nvml_file, "w") as f:
        f.write("Fake-H200 150000000000 2000000000 37 215000 51 -\n")
    cl.env.update({"PX_SIM_DEVICE": "1", "PX_SIM_DEVICE_MB": "512", "PX_GPU_SAMPLE_MS": "500",
                   "FAKE_NVML_FILE": nvml_file,
                   "LD_LIBRARY_PATH": fake_dir + ":" + os.environ.get("LD_LIBRARY_PATH", "")})
    (d,) = cl.daemons
    d.env = cl.env
    mport = pc.free_port()
    d.extra = ["--metrics-listen", "127.0.0.1:%d" % mport, "--devices", "cpu:2,sim:1"]
    murl = "http://127.0.0.1:%d/metrics" % mport
    data = os.path.join(cl.workdir, "train.bin")
    val = os.path.join(cl.workdir, "val.bin")
    pc.write_llmc_tokens(data, max_tokens=120000)
    pc.write_llmc_tokens(val, max_tokens=30000)
    g = pc.Grpc(d, args.proto)
    cl.start(lambda daemon: g)
    pdir = os.path.join(cl.workdir, "prometheus")
    os.makedirs(pdir)
    pport = pc.free_port()
    cfg = os.path.join(pdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: parallaxd\n    honor_labels: true\n"
                "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % mport)
    plog = open(os.path.join(pdir, "log"), "w")
    pproc = subprocess.Popen([prom, "--config.file", cfg, "--storage.tsdb.path",
                              os.path.join(pdir, "data"), "--web.listen-address",
                              "127.0.0.1:%d" % pport], stdout=plog, stderr=subprocess.STDOUT)
    api = "http://127.0.0.1:%d/api/v1/" % pport

    def stop_prometheus(failed):
        pproc.terminate()
        try:
            pproc.wait(10)
        except subprocess.TimeoutExpired:
            pproc.kill()
        plog.close()
        if failed:
            print(open(os.path.join(pdir, "log")).read()[-2000:])
    cl.on_exit(stop_prometheus)
    with cl:
        r = subprocess.run([args.pctl, "--server", d.control, "submit", "--data", data,
                            "--val-data", val, "--dp", "2", "--batch", "8", "--steps", "100000",
                            "--eval-every", "30", "--eval-batches", "2", "--layers", "2",
                            "--heads", "2", "--dim", "64", "--seq", "64", "--name", "prom",
                            "--json"], capture_output=True, text=True, timeout=30, check=True)
        jid = json.loads(r.stdout)["job_id"]
        pc.wait_state(g, jid, ["RUNNING", "COMPLETED", "FAILED"], 60)

        def page_with_val():
            _, text = get(murl)
            return text if 'parallax_job_val_loss{job="%s"' % jid in text else None
        page = pc.wait_for(page_with_val, 120, "a running job with a validation loss on the page")
        chk = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                             text=True)
        assert chk.returncode == 0, "promtool check metrics:\n%s%s" % (chk.stdout, chk.stderr)
        print("promtool check metrics: ok (%d lines)" % len(page.splitlines()))
        for fam in ["parallax_jobs{state=\"running\"} 1", 'parallax_job_step{job="%s"' % jid,
                    'parallax_job_loss{job="%s"' % jid, 'parallax_job_tokens_per_second{job="%s"'
                    % jid, 'parallax_job_step_seconds{job="%s"' % jid,
                    'parallax_device_busy{node="%s",device="cpu:0",job="%s"} 1' % (d.name, jid),
                    'parallax_rpc_requests_total{service="Control",method="SubmitJob",code="OK"} 1',
                    'parallax_rpc_duration_seconds_bucket{service="Control",method="SubmitJob",'
                    'code="OK",le="+Inf"} 1', "# TYPE parallax_rpc_duration_seconds histogram",
                    "parallax_job_restarts_total 0",
                    'parallax_rank_memory_bytes{job="%s",rank="0",node="%s",device="cpu:0",'
                    'category="params",kind="peak"}' % (jid, d.name),
                    "parallax_build_info{node=",
                    'parallax_gpu_memory_used_bytes{node="%s",device="sim:0"} 2000000000' % d.name,
                    'parallax_gpu_memory_total_bytes{node="%s",device="sim:0"} 150000000000'
                    % d.name,
                    'parallax_gpu_utilization_ratio{node="%s",device="sim:0"} 0.37' % d.name,
                    'parallax_gpu_power_watts{node="%s",device="sim:0"} 215' % d.name,
                    'parallax_gpu_temperature_celsius{node="%s",device="sim:0"} 51' % d.name,
                    'parallax_gpu_processes{node="%s",device="sim:0"} 0' % d.name,
                    'parallax_gpu_foreign_processes{node="%s",device="sim:0"} 0' % d.name,
                    "# TYPE parallax_gpu_utilization_ratio gauge"]:
            assert fam in page, "the page lacks %r:\n%s" % (fam, page)
        try:
            get(murl.replace("/metrics", "/"))
            raise AssertionError("GET / did not answer 404")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e.code
        try:
            urllib.request.urlopen(urllib.request.Request(murl, data=b"x", method="POST"),
                                   timeout=5)
            raise AssertionError("POST did not answer 405")
        except urllib.error.HTTPError as e:
            assert e.code == 405, e.code

        def prom_series(q):
            now = time.time()
            url = api + "query_range?" + urllib.parse.urlencode(
                {"query": q, "start": now - 600, "end": now, "step": "1"})
            try:
                _, body = get(url)
            except (urllib.error.URLError, OSError):
                return None
            res = json.loads(body)["data"]["result"]
            return res[0]["values"] if res and len(res[0]["values"]) >= 3 else None
        loss = pc.wait_for(lambda: prom_series('parallax_job_loss{job="%s"}' % jid), 90,
                           "Prometheus to hold 3 samples of the job's loss")
        vloss = pc.wait_for(lambda: prom_series('parallax_job_val_loss{job="%s"}' % jid), 60,
                            "Prometheus to hold the job's validation loss")
        for q, want in (('parallax_gpu_utilization_ratio{node="%s",device="sim:0"}' % d.name, 0.37),
                        ('parallax_gpu_memory_used_bytes{node="%s",device="sim:0"}' % d.name, 2e9)):
            got = pc.wait_for(lambda: prom_series(q), 60, "Prometheus to hold %s" % q)
            assert all(float(v) == want for _, v in got), (q, got)
            print("Prometheus holds %d samples of %s, each %s" % (len(got), q, got[0][1]))
        # long enough for any machine's speed: cancelled once scraped
        subprocess.run([args.pctl, "--server", d.control, "cancel", jid], capture_output=True,
                       check=True, timeout=30)
        pc.wait_state(g, jid, ["CANCELLED"], 60)
        steps = json.loads(subprocess.run([args.pctl, "--server", d.control, "metrics", jid,
                                           "--json"], capture_output=True, text=True,
                                          check=True).stdout)
        losses = [m["loss"] for m in steps]
        vals = [m["val_loss"] for m in steps if m["val_loss"] is not None]
        for _, v in loss:
            assert any(abs(float(v) - l) <= 1e-6 * abs(l) for l in losses), \
                "Prometheus loss %s is none of the job's %s" % (v, losses)
        for _, v in vloss:
            assert any(abs(float(v) - l) <= 1e-6 * abs(l) for l in vals), (v, vals)
        print("Prometheus holds %d loss samples (%s .. %s) and %d validation-loss samples of %s"
              % (len(loss), loss[0][1], loss[-1][1], len(vloss), jid))
        codes = cl.stop()
        assert codes == [0], codes
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
