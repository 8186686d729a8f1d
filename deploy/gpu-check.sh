#!/usr/bin/env bash
# shellcheck disable=SC2317  # the section_* functions run in a child: gpu-check.sh __section NAME
# The device check, run on a GPU machine from the folder deploy/gpu-bundle.sh
# made (the machine has the NVIDIA driver, CUDA runtime, cuBLAS and PyTorch;
# cuDNN, NCCL and ncu where it has them). Every figure goes to stdout.
#
# Usage: ./gpu-check.sh [--sim] [SECTION...]
#   SECTION: ops layouts daemon attn coll profile speed (default: all, in
#   that order: correctness first, then the measurements, cheapest first)
#     ops      px-opcheck (each CUDA op against its CPU reference), the bf16
#              GEMM peak, one CUDA rank against one CPU rank (fp32 1e-5, bf16
#              1e-3) and PX_CUDA_ATTN=cudnn against the tensor-core kernels
#     layouts  every parallel layout as 2 or 4 ranks on the GPU against one
#              CUDA rank, bf16 against fp32 and the CPU, checkpoints CUDA <->
#              CPU: one table (py/layouts.py)
#     daemon   a dp=2 and a tp=2 job through parallaxd --gpu-share 2 on the
#              one GPU against the standalone runs; pctl nodes and /metrics'
#              parallax_gpu_* while one runs (py/daemon_check.py); SKIP where
#              parallaxd has no --gpu-share
#     attn     the bf16 attention forward + backward at B 8, T 1024, 12 heads
#              of 64, causal: each of our kernel families (px-opcheck
#              --attn-rate: tc, simt, cudnn) beside PyTorch SDPA's flash,
#              cuDNN and memory-efficient backends (py/sdpa_bench.py)
#     coll     px-ipc-check (2 ranks, every case bit for bit, exit 0 on every
#              rank), then all-reduce, all-gather, reduce-scatter, all-to-all
#              busbw 4 KiB - 256 MiB: device path, staged, host, a device-to-
#              device copy of the size, NCCL (py/coll.py)
#     profile  one bf16 step of the 124M shape at batch 8 under ncu, by op
#              family, beside the step time measured without it
#              (py/ncu_profile.py); SKIP without ncu
#     speed    GPT-2 124M: parallax, PyTorch eager and torch.compile at batch
#              8, 32 and 64 in bf16 and at 8 in fp32: tokens/s, MFU, ratios
#              (py/speed.py)
#   and, only when named (not in the default run's 8 minutes):
#     ipcproto the IPC path under PX_IPC_PROTOCOL=event (shared CUDA events
#              instead of a host synchronize per chunk): px-ipc-check's cases
#              bit for bit, then px-ipc-check --bench under sync and event
#              with 32 MiB slots and chunks (all-reduce, all-gather,
#              reduce-scatter 4 KiB - 256 MiB, busbw beside the copy limit);
#              SKIP with --sim
#   --sim  no GPU: the sections that have a CPU form run it (layouts on the
#          simulated device, daemon on sim:1, coll on the fake device and host
#          buffers); the others SKIP. For trying the bundle on a CPU machine;
#          the limits are 3x (its ranks run slower).
# Each section prints a header, PASS/FAIL lines and its time, and runs under
# its own time limit (BUDGET below, 480 s in all; a hung section is killed
# with its processes and counts as FAIL; the section's drivers print as they
# go, so what was measured before stays), so the whole default run ends
# within 8 minutes. A summary table of the sections ends the output.
# Exit status: 0 when no section failed (SKIP is not a failure), else 1;
# 2 on a bad argument.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
pydir=$here/py
py=${PYTHON:-python3}
order=(ops layouts daemon attn coll profile speed)
# seconds each section may take, adding up to 8 minutes (its expected time on
# an H200 in brackets): ops 40 (20), layouts 90 (50), daemon 45 (25),
# attn 30 (15), coll 75 (55), profile 60 (40), speed 140 (120)
declare -A BUDGET=([ops]=40 [layouts]=90 [daemon]=45 [attn]=30 [coll]=75 [profile]=60
                   [speed]=140 [ipcproto]=120)

usage() {
  sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---- sections (each runs in a child of its own: `gpu-check.sh __section NAME`) ----

# name, file a, file b, tolerance: step losses of two parallax-rank outputs
compare() {
  "$py" - "$@" <<'PY'
import sys
name, fa, fb, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(f):
    return [float(l.split()[3]) for l in open(f) if l.startswith("step")]
a, b = losses(fa), losses(fb)
if len(a) < 5 or len(b) < 5:
    print(f"{name}: FAIL (steps: {len(a)} vs {len(b)})"); sys.exit(1)
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"{name}: max rel diff of 5 losses {worst:.2e} (tol {tol:g}): {'PASS' if worst <= tol else 'FAIL'}")
sys.exit(0 if worst <= tol else 1)
PY
}

section_ops() {
  local rc=0 small d p
  [ "$sim" = 1 ] && { echo "SKIP: no GPU (--sim)"; return 77; }
  "$bin/px-opcheck" || { echo "px-opcheck: FAIL (exit $?)"; rc=1; }
  "$bin/px-opcheck" --gemm-peak | tee "$work/gemm.txt"
  "$py" "$pydir/make_tokens.py" "$work/tok.bin" 200000 50257
  small=(--layers 2 --heads 4 --dim 128 --seq 64 --vocab 50257 --batch 8 --steps 5 --data "$work/tok.bin")
  for d in cpu cuda; do
    for p in fp32 bf16; do
      "$bin/parallax-rank" --device "$d" --precision "$p" "${small[@]}" > "$work/one_${d}_$p.txt" 2> "$work/one_${d}_$p.err" ||
        { echo "parallax-rank --device $d --precision $p: FAIL"; tail -5 "$work/one_${d}_$p.err"; rc=1; }
    done
  done
  compare "1 CUDA rank vs 1 CPU rank, fp32" "$work/one_cuda_fp32.txt" "$work/one_cpu_fp32.txt" 1e-5 || rc=1
  compare "1 CUDA rank vs 1 CPU rank, bf16" "$work/one_cuda_bf16.txt" "$work/one_cpu_bf16.txt" 1e-3 || rc=1
  PX_CUDA_ATTN=cudnn "$bin/parallax-rank" --device cuda --precision bf16 "${small[@]}" > "$work/one_cudnn.txt" 2> "$work/one_cudnn.err"
  if grep -qi 'cudnn.*loaded' "$work/one_cudnn.err"; then
    compare "bf16, PX_CUDA_ATTN=cudnn vs the tensor-core attention" "$work/one_cudnn.txt" "$work/one_cuda_bf16.txt" 1e-3 || rc=1
  else
    echo "PX_CUDA_ATTN=cudnn: SKIP ($(grep -m1 -i 'cudnn' "$work/one_cudnn.err" || echo 'no cuDNN line in the rank log'))"
  fi
  return "$rc"
}

section_layouts() {
  local dev=cuda
  [ "$sim" = 1 ] && dev=sim
  "$py" "$pydir/layouts.py" --rank "$bin/parallax-rank" --work "$work/layouts" --device "$dev" --jobs 6
}

section_daemon() {
  local devices=(--devices cuda)
  [ "$sim" = 1 ] && devices=(--devices sim:1 --model small --steps 5)
  "$py" "$pydir/daemon_check.py" --parallaxd "$bin/parallaxd" --pctl "$bin/pctl" \
    --rank "$bin/parallax-rank" --work "$work/daemon" --share 2 "${devices[@]}"
}

section_attn() {
  [ "$sim" = 1 ] && { echo "SKIP: no GPU (--sim)"; return 77; }
  local rc=0
  "$bin/px-opcheck" --attn-rate | tee "$work/attn_ours.txt" || { echo "px-opcheck --attn-rate: FAIL"; rc=1; }
  "$py" "$pydir/sdpa_bench.py" | tee "$work/attn_sdpa.txt" || { echo "sdpa_bench.py: FAIL"; rc=1; }
  # ours best against SDPA's best, and the goal (<= 0.6 ms forward + backward)
  "$py" - "$work/attn_ours.txt" "$work/attn_sdpa.txt" <<'PY'
import re, sys
def best(path, pat):
    r = [(float(m.group(2)), m.group(1)) for m in (re.match(pat, l) for l in open(path)) if m]
    return min(r) if r else None
o = best(sys.argv[1], r"attn-rate bf16 (\S+) .*: ([\d.]+) ms fwd\+bwd")
t = best(sys.argv[2], r"sdpa (\S+) .*: ([\d.]+) ms fwd\+bwd")
print("attention fwd+bwd: ours best %s, SDPA best %s%s" % (
    "%.3f ms (%s)" % o if o else "-", "%.3f ms (%s)" % t if t else "-",
    "; ours/SDPA %.2fx the time" % (o[0] / t[0]) if o and t else ""))
if o:
    print("goal attention fwd+bwd <= 0.6 ms: %s" % ("met" if o[0] <= 0.6 else "not met"))
PY
  return "$rc"
}

section_coll() {
  local rc=0 dev=cuda extra=(--copy-limit --nccl "$pydir/nccl_bench.py")
  if [ "$sim" = 1 ]; then
    dev=fake; extra=(--check --max 1M)
  else
    "$bin/px-ipc-check" -n 2 --device cuda > "$work/ipc_check.txt" 2>&1; local ipc=$?
    tail -4 "$work/ipc_check.txt"
    if [ "$ipc" -eq 0 ]; then echo "px-ipc-check -n 2 --device cuda: exit 0 on every rank: PASS"
    else echo "px-ipc-check -n 2 --device cuda: exit $ipc: FAIL; its failed cases and errors:"
         grep -E '^(rank [0-9]+:|px_launch:)' "$work/ipc_check.txt" | head -20; rc=1; fi
  fi
  "$py" "$pydir/coll.py" --bench "$bin/px-coll-bench" --device "$dev" --timeout 30 "${extra[@]}" || rc=1
  return "$rc"
}

section_ipcproto() {
  [ "$sim" = 1 ] && { echo "SKIP: no GPU (--sim)"; return 77; }
  local rc=0 p
  "$bin/px-ipc-check" -n 2 --device cuda --protocol event > "$work/ipc_event.txt" 2>&1; local ipc=$?
  tail -4 "$work/ipc_event.txt"
  if [ "$ipc" -eq 0 ]; then echo "px-ipc-check --protocol event: exit 0 on every rank: PASS"
  else echo "px-ipc-check --protocol event: exit $ipc: FAIL; its failed cases and errors:"
       grep -E '^(rank [0-9]+:|px_launch:)' "$work/ipc_event.txt" | head -20; rc=1; fi
  for p in sync event; do
    echo "-- px-ipc-check --bench, $p protocol, 32 MiB slots and chunks (goal at 64 MiB: >= 300 GB/s busbw; 4 KiB all-reduce <= 30 us)"
    PX_IPC_SLOT_BYTES=33554432 PX_IPC_CHUNK_BYTES=33554432 \
      "$bin/px-ipc-check" -n 2 --device cuda --protocol "$p" --bench 2>&1 | grep -E 'bench|FAIL|^rank' || rc=1
  done
  return "$rc"
}

section_profile() {
  [ "$sim" = 1 ] && { echo "SKIP: no GPU (--sim)"; return 77; }
  local ncu limit=3000
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  [ -n "$ncu" ] || { echo "SKIP: ncu not found (PATH, /usr/local/cuda/bin)"; return 77; }
  "$py" "$pydir/make_tokens.py" "$work/tok124.bin" 1000000 50257
  local model=(--layers 12 --heads 12 --dim 768 --seq 1024 --vocab 50257 --batch 8
               --data "$work/tok124.bin" --device cuda --precision bf16)
  # the step time without the profiler: the mean step_s of steps 3-6
  "$bin/parallax-rank" "${model[@]}" --steps 6 --metrics-out "$work/prof_steps.jsonl" > /dev/null 2> "$work/prof_steps.err" ||
    { echo "parallax-rank (step time): FAIL"; tail -5 "$work/prof_steps.err"; return 1; }
  local step_ms
  step_ms=$("$py" -c 'import json,sys; s=[json.loads(l)["step_s"] for l in open(sys.argv[1]) if l.strip()][2:]; print("%.3f" % (1e3*sum(s)/len(s)))' "$work/prof_steps.jsonl")
  echo "step time without the profiler: $step_ms ms (mean of steps 3-6)"
  # one step under ncu: every launch of step 1 (at most $limit)
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel -c "$limit" \
    "$bin/parallax-rank" "${model[@]}" --steps 1 > "$work/ncu.txt" 2>&1 ||
    { echo "ncu: FAIL"; tail -15 "$work/ncu.txt"; return 1; }
  local n
  n=$(grep -c '==PROF== Profiling' "$work/ncu.txt")
  [ "$n" -ge "$limit" ] && echo "note: ncu stopped at $limit launches: the figures are of those"
  "$py" "$pydir/ncu_profile.py" "$work/ncu.txt" --step-ms "$step_ms" --top 12
}

section_speed() {
  [ "$sim" = 1 ] && { echo "SKIP: no GPU (--sim)"; return 77; }
  "$py" "$pydir/speed.py" --rank "$bin/parallax-rank" --torch-gpt2 "$pydir/torch_gpt2.py" \
    --python "$py" --peak-tflops "$peak" --batches 8,32,64 --steps 10 --warmup 3 \
    --timeout 45 --deadline $(( BUDGET[speed] - 10 )) --work "$work/speed"
}

# ---- the child: one section ----
if [ "${1:-}" = "__section" ]; then
  section_"$2"
  exit $?
fi

# ---- the parent: arguments, the machine, each section under its limit, the summary ----
sim=0
want=()
for a in "$@"; do
  case "$a" in
    --sim) sim=1 ;;
    -h|--help) usage ;;
    *) [ -n "${BUDGET[$a]:-}" ] || { echo "gpu-check.sh: unknown section '$a' (one of: ${order[*]})" >&2; usage; }
       want+=("$a") ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=("${order[@]}")
# --sim: three times the limits (a CPU machine runs the ranks slower); then
# PX_CHECK_LIMIT_<section>=S sets one (a slower GPU; tests)
for s in "${order[@]}"; do
  [ "$sim" = 1 ] && BUDGET[$s]=$(( 3 * BUDGET[$s] ))
  v=PX_CHECK_LIMIT_$s
  if [ -n "${!v:-}" ]; then
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check.sh: $v='${!v}' is not a number of seconds" >&2; exit 2; }
    BUDGET[$s]=${!v}
  fi
done

work=$(mktemp -d /tmp/px-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
# the large libraries and binaries travel xz-compressed (gpu-bundle.sh):
# unpacked here, the binaries beside copies of the others in $work/bin
mkdir -p "$work/lib" "$work/bin"
for z in "$here"/lib/*.xz "$here"/bin/*.xz; do
  [ -e "$z" ] || continue
  "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$z" "$work/$(basename "$(dirname "$z")")/$(basename "$z" .xz)" ||
    { echo "gpu-check.sh: cannot unpack $z with $py" >&2; exit 1; }
done
for b in "$here"/bin/*; do
  case "$b" in *.xz) ;; *) cp "$b" "$work/bin/" ;; esac
done
chmod +x "$work"/bin/*
bin=$work/bin
export LD_LIBRARY_PATH="$here/lib:$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"

echo "=== machine"
[ -f "$here/COMMIT" ] && echo "parallax commit $(cat "$here/COMMIT")"
gpu=
if [ "$sim" = 0 ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  [ -n "$gpu" ] || { echo "no GPU found (nvidia-smi); run with --sim on a CPU machine"; }
fi
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null || echo "torch: not importable by $py"
case "$gpu" in
  *H100*|*H200*) peak=989 ;;  # dense bf16, SXM
  *A100*) peak=312 ;;
  *) peak=989; [ -n "$gpu" ] && echo "note: spec peak unknown for '$gpu'; using 989 TFLOP/s" ;;
esac
echo "spec bf16 dense peak: $peak TFLOP/s; sections: ${want[*]}$([ "$sim" = 1 ] && echo ' (--sim: no GPU)')"
export work sim peak py bin pydir

declare -A result took
t_all=$(date +%s)
for s in "${want[@]}"; do
  echo
  echo "=== $s (limit ${BUDGET[$s]} s; $(( $(date +%s) - t_all )) s into the check)"
  t0=$(date +%s)
  if [ "$sim" = 0 ] && [ -z "$gpu" ]; then
    rc=77; echo "SKIP: no GPU (--sim runs the sections that have a CPU form)"
  else
    timeout --kill-after=10 "${BUDGET[$s]}" "$here/$(basename "$0")" __section "$s"
    rc=$?
  fi
  took[$s]=$(( $(date +%s) - t0 ))
  case $rc in
    0) result[$s]=PASS ;;
    77) result[$s]=SKIP ;;
    124|137) result[$s]=FAIL; echo "$s: FAIL: stopped at its limit of ${BUDGET[$s]} s" ;;
    *) result[$s]=FAIL ;;
  esac
  echo "--- $s: ${result[$s]} in ${took[$s]} s"
done

echo
echo "=== summary ($(( $(date +%s) - t_all )) s)"
printf '%-9s %-6s %7s %7s\n' section result time limit
fail=0
for s in "${want[@]}"; do
  printf '%-9s %-6s %6ss %6ss\n' "$s" "${result[$s]}" "${took[$s]}" "${BUDGET[$s]}"
  [ "${result[$s]}" = FAIL ] && fail=1
done
echo "gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
