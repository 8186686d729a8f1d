#!/usr/bin/env bash
# The main job, end to end, on one machine: two parallaxd daemons on loopback
# (node-a and node-b, 2 CPU devices each, peers of each other), a GPT trained
# with data parallelism over all 4 devices (dp=4) on Shakespeare's plays
# (deploy/fetch-corpus.sh), validated on the held-out 5% of them every 40
# steps, progress shown while it runs, the final training and validation loss
# and tokens/s printed, a 200-character sample of the model's Shakespeare
# (pctl sample), then the daemons stopped.
#
# Usage: deploy/quickstart.sh        (sets the machine up first: deploy/setup.sh,
#                                     without the tests' packages)
#   PX_QS_STEPS   training steps (default 400)
#   PX_QS_PORT    first of the four loopback ports used (default 7070)
#   PX_QS_DIR     state and logs (default <repo>/.quickstart)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}
steps=${PX_QS_STEPS:-400}
port=${PX_QS_PORT:-7070}
work=${PX_QS_DIR:-$root/.quickstart}

"$root/deploy/setup.sh"
data=$("$root/deploy/fetch-corpus.sh")

pctl="$build/client/pctl"
pxd="$build/daemon/parallaxd"
a_ctl=127.0.0.1:$port a_peer=127.0.0.1:$((port + 1))
b_ctl=127.0.0.1:$((port + 2)) b_peer=127.0.0.1:$((port + 3))
mkdir -p "$work/node-a" "$work/node-b"

pids=()
stop_daemons() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_daemons EXIT

echo "== starting parallaxd node-a ($a_ctl) and node-b ($b_ctl), 2 CPU devices each"
"$pxd" --name node-a --listen "$a_ctl" --peer-listen "$a_peer" --peers "$b_peer" \
  --state-dir "$work/node-a" --runtime-dir "$work/node-a/run" --devices cpu:2 \
  >"$work/node-a.log" 2>&1 &
pids+=($!)
"$pxd" --name node-b --listen "$b_ctl" --peer-listen "$b_peer" --peers "$a_peer" \
  --state-dir "$work/node-b" --runtime-dir "$work/node-b/run" --devices cpu:2 \
  >"$work/node-b.log" 2>&1 &
pids+=($!)

# Wait until node-a sees both nodes alive (heartbeats exchanged).
for i in $(seq 1 100); do
  alive=$("$pctl" --server "$a_ctl" nodes --json 2>/dev/null |
    python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) if n.get("alive")))' 2>/dev/null || echo 0)
  [ "$alive" = 2 ] && break
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || {
    echo "quickstart: a daemon exited; its log:" >&2; tail -n 20 "$work"/node-*.log >&2; exit 1; }; done
  sleep 0.2
done
[ "$alive" = 2 ] || { echo "quickstart: the two daemons did not see each other" >&2; exit 1; }
"$pctl" --server "$a_ctl" nodes

echo "== training: GPT 4 layers, 4 heads, dim 128, seq 128; dp=4, global batch 16; $steps steps"
set +e
"$pctl" --server "$a_ctl" submit --name quickstart --layers 4 --heads 4 --dim 128 --seq 128 \
  --dp 4 --batch 16 --steps "$steps" --lr 2e-3 --seed 1337 --data "$data" --follow
rc=$?
set -e
job=$("$pctl" --server "$a_ctl" list --json | python3 -c \
  'import json,sys; j=[x for x in json.load(sys.stdin) if x.get("name")=="quickstart"]; print(max(j, key=lambda x: x.get("created_ms",0))["id"])')
echo "== final status of $job"
"$pctl" --server "$a_ctl" status "$job"
"$pctl" --server "$a_ctl" status "$job" --json | python3 -c '
import json,sys; j=json.load(sys.stdin)
print("final loss %.4f after %d steps, validation loss %s, %.0f tokens/s, state %s" % (
    j["loss"], j["step"], "%.4f" % j["val_loss"] if j.get("val_loss") is not None else "-",
    j["tokens_per_second"], j["state"]))'
if [ "$rc" = 0 ]; then
  echo "== a sample of the model: pctl sample $job --tokens 200"
  "$pctl" --server "$a_ctl" sample "$job" --tokens 200 || rc=$?
fi
echo "== stopping the daemons"
stop_daemons
exit $rc
