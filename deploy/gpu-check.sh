#!/usr/bin/env bash
# The device check, run on a GPU machine from the folder
# deploy/gpu-bundle.sh made (CUDA driver/runtime, cuBLAS and PyTorch there;
# nothing else needed). One command, at most ~8 minutes, every figure on
# stdout:
#   1. px-opcheck: each CUDA op against its CPU reference (fp32 1e-5, bf16 1e-2)
#      (with cuDNN's fused attention, PX_CUDA_ATTN=cudnn, against the same
#      reference at 1e-2, and its lse against the tensor-core kernels')
#   2. the bf16 cuBLAS GEMM peak (8192^3), and the bf16 attention's rate at
#      the 124M shape on the tensor cores, on the CUDA cores (simt) and
#      through cuDNN (ms forward and backward apart; goal <= 0.6 ms)
#   3. the GPT-2 124M shape (12 x 768, 12 heads, seq 1024, vocab 50257 padded
#      to 50304) in bf16 (--precision bf16: bf16 GEMMs, fp32 elsewhere):
#      parallax's tokens/s and MFU (llm.c's count, 6N + 6*L*C*T FLOPs per
#      token, over the spec peak and over the measured GEMM peak) beside
#      PyTorch bf16 autocast on the same GPU, model and batch, and the ratio;
#      parallax fp32 beside it for reference; and parallax bf16 with
#      PX_CUDA_ATTN=cudnn (tokens/s beside the tensor-core kernels')
#   4. equivalence on the GPU: one CUDA rank against one CPU rank, and dp=2
#      (two ranks on the one GPU) against one rank, 5 steps, fp32, loss 1e-5;
#      and one CUDA rank in bf16 against it in fp32 (loss 1e-2) and against
#      one CPU rank in bf16 (1e-3: the same rounding, different accumulation);
#      and bf16 with PX_CUDA_ATTN=cudnn against bf16 on the tensor cores (1e-3)
#   5. collectives: px-ipc-check (2 ranks on the GPU all-reducing, reduce-
#      scattering, gathering, broadcasting and exchanging device buffers
#      through CUDA IPC, bit for bit the staged and host paths), then
#      px-coll-bench all-reduce / all-gather busbw, 1-256 MiB, on host
#      buffers, device buffers staged (PX_IPC=0) and through CUDA IPC, and
#      NCCL's through torch.distributed
# Usage: ./gpu-check.sh [--quick | --attn]   (--quick: 5 steps instead of 30;
#   --attn: only what concerns the bf16 attention, about a minute: the op
#   checks, --attn-rate, the cudnn/tensor-core loss comparison and the 124M
#   shape's tokens/s with each)
# Exit status: 0 when the op checks, the equivalence checks and px-ipc-check pass.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
work=$(mktemp -d /tmp/px-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=${PYTHON:-python3}
# the large libraries travel xz-compressed (gpu-bundle.sh): unpack them here
mkdir -p "$work/lib"
for z in "$here"/lib/*.xz; do
  [ -e "$z" ] || continue
  $py -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$z" "$work/lib/$(basename "$z" .xz)"
done
export LD_LIBRARY_PATH="$here/lib:$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
steps=30
[ "${1:-}" = "--quick" ] && steps=5
attn_only=0
[ "${1:-}" = "--attn" ] && attn_only=1
fail=0
t_start=$(date +%s)
section() { echo; echo "=== $* ($(( $(date +%s) - t_start )) s)"; }
compare() { # name, file a, file b [tolerance, default 1e-5]
  $py - "$@" <<'PY'
import sys
name, fa, fb = sys.argv[1:4]
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
def losses(f):
    return [float(l.split()[3]) for l in open(f) if l.startswith("step")]
a, b = losses(fa), losses(fb)
if len(a) < 5 or len(b) < 5:
    print(f"{name}: FAIL (steps: {len(a)} vs {len(b)})"); sys.exit(1)
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"{name}: losses {' '.join('%.6f' % x for x in a)} vs {' '.join('%.6f' % y for y in b)}; "
      f"max rel diff {worst:.2e} (tol {tol:g}): {'PASS' if worst <= tol else 'FAIL'}")
sys.exit(0 if worst <= tol else 1)
PY
}

section "machine"
[ -f "$here/COMMIT" ] && echo "parallax commit $(cat "$here/COMMIT")"
gpu=$($py -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null || nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
$py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "torch: not importable"
case "$gpu" in
  *H100*|*H200*|*GH200*) peak=989 ;;  # dense bf16, SXM
  *A100*) peak=312 ;;
  *) peak=989; echo "note: spec peak unknown for '$gpu'; using 989 TFLOP/s" ;;
esac
echo "spec bf16 dense peak: $peak TFLOP/s"

section "1. op checks (CUDA vs CPU)"
timeout 240 "$bin/px-opcheck"; rc=$?
echo "px-opcheck exit $rc"
[ $rc -eq 0 ] || fail=1

if [ $attn_only -eq 1 ]; then
  section "attention: rate at the 124M shape (tc, simt, cudnn; goal <= 0.6 ms fwd+bwd)"
  timeout 120 "$bin/px-opcheck" --attn-rate || { echo "px-opcheck --attn-rate failed (exit $?)"; fail=1; }
  section "attention: PX_CUDA_ATTN=cudnn in training (bf16)"
  $py "$here/py/make_tokens.py" "$work/tok.bin" 2000000 50257
  small="--layers 2 --heads 4 --dim 128 --seq 64 --vocab 50257 --batch 8 --steps 5 --data $work/tok.bin"
  timeout 120 "$bin/parallax-rank" --device cuda --precision bf16 $small > "$work/gpu1b.txt" 2> "$work/gpu1b.err"
  PX_CUDA_ATTN=cudnn timeout 120 "$bin/parallax-rank" --device cuda --precision bf16 $small > "$work/gpu1d.txt" 2> "$work/gpu1d.err"
  grep -m2 -i 'cudnn' "$work/gpu1d.err"
  compare "bf16 1 CUDA rank, PX_CUDA_ATTN=cudnn vs tensor-core attention" "$work/gpu1d.txt" "$work/gpu1b.txt" 1e-3 || { fail=1; tail -5 "$work/gpu1d.err"; }
  model="--layers 12 --heads 12 --dim 768 --seq 1024 --vocab 50257 --batch 8 --data $work/tok.bin --lr 6e-4 --steps 8"
  tps_of() { awk '/^step/ && $2 > 2 {s += $10; n++} END {if (n) printf "%.0f", s / n; else print 0}' "$1"; }
  for a in tc cudnn; do
    PX_CUDA_ATTN=$a timeout 200 "$bin/parallax-rank" --device cuda --precision bf16 $model > "$work/m_$a.txt" 2> "$work/m_$a.err" || { echo "124M with PX_CUDA_ATTN=$a failed:"; tail -5 "$work/m_$a.err"; fail=1; }
    echo "GPT-2 124M bf16, batch 8, PX_CUDA_ATTN=$a: tokens/s $(tps_of "$work/m_$a.txt") (steps 3-8)"
  done
  section "done: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
  exit $fail
fi

section "2. cuBLAS bf16 GEMM peak"
timeout 60 "$bin/px-opcheck" --gemm-peak > "$work/gemm.txt" 2>&1
cat "$work/gemm.txt"
gemm=$(awk '/^gemm-peak/ {print $(NF-1)}' "$work/gemm.txt")
gemm=${gemm:-0}
# the bf16 attention at the 124M shape: the tensor-core kernels beside the
# CUDA-core ones and cuDNN's fused attention (TFLOP/s by the causal count,
# forward + 2.5x backward); cuDNN comes from the machine (libcudnn.so.9 in
# its library path; the bundle packs none)
timeout 60 "$bin/px-opcheck" --attn-rate || echo "px-opcheck --attn-rate failed (exit $?)"

section "3. GPT-2 124M shape"
$py "$here/py/make_tokens.py" "$work/tok.bin" 2000000 50257
B=8
model="--layers 12 --heads 12 --dim 768 --seq 1024 --vocab 50257 --batch $B --data $work/tok.bin --lr 6e-4"
n_params=$($py - <<'PY'
L, C, T, Vp = 12, 768, 1024, 50304
print(Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C)
PY
)
echo "parameters: $n_params; FLOPs/token = 6N + 6*L*C*T"
ours_steps=$(( steps < 10 ? steps : 10 ))
# tokens/s: the mean over steps after the first two (warm-up)
tps_of() { awk '/^step/ && $2 > 2 {s += $10; n++} END {if (n) printf "%.0f", s / n; else print 0}' "$1"; }
mfu() { $py -c "import sys; n,tps,pk=map(float,sys.argv[1:]); print('%.1f' % (100*(6*n+6*12*768*1024)*tps/(pk*1e12)) if pk>0 else 'n/a')" "$n_params" "$1" "$2"; }
timeout 300 "$bin/parallax-rank" --device cuda --precision bf16 $model --steps "$steps" > "$work/ours_bf16.txt" 2> "$work/ours_bf16.err"
rc=$?
cat "$work/ours_bf16.txt"
grep -m1 -o 'precision bf16[^;]*' "$work/ours_bf16.err"
[ $rc -eq 0 ] || { echo "parallax-rank --precision bf16 exit $rc:"; tail -20 "$work/ours_bf16.err"; }
ours_tps=$(tps_of "$work/ours_bf16.txt")
echo "parallax bf16 (bf16 GEMMs on tensor cores via cublasGemmEx, fp32 elsewhere): tokens/s $ours_tps, MFU $(mfu "$ours_tps" "$peak")% of spec bf16 peak, $(mfu "$ours_tps" "$gemm")% of measured GEMM peak"
PX_CUDA_ATTN=cudnn timeout 200 "$bin/parallax-rank" --device cuda --precision bf16 $model --steps $ours_steps > "$work/ours_dnn.txt" 2> "$work/ours_dnn.err"
rc=$?
[ $rc -eq 0 ] || { echo "parallax-rank --precision bf16 PX_CUDA_ATTN=cudnn exit $rc:"; tail -20 "$work/ours_dnn.err"; }
grep -m3 -i 'cudnn' "$work/ours_dnn.err"
ours_dnn=$(tps_of "$work/ours_dnn.txt")
echo "parallax bf16 with PX_CUDA_ATTN=cudnn: tokens/s $ours_dnn, MFU $(mfu "$ours_dnn" "$peak")% of spec bf16 peak (tensor-core attention: $ours_tps)"
timeout 200 "$bin/parallax-rank" --device cuda $model --steps $ours_steps > "$work/ours.txt" 2> "$work/ours.err"
rc=$?
[ $rc -eq 0 ] || { echo "parallax-rank fp32 exit $rc:"; tail -20 "$work/ours.err"; }
ours_fp32=$(tps_of "$work/ours.txt")
echo "parallax fp32 (CUDA cores + cuBLAS sgemm, no TF32): tokens/s $ours_fp32, MFU $(mfu "$ours_fp32" "$peak")% of spec bf16 peak"
torch_bf16=$(timeout 200 $py "$here/py/torch_gpt2.py" --batch $B --steps "$steps" --precision bf16 --peak-tflops "$peak" 2>&1 | tail -1)
echo "$torch_bf16"
torch_fp32=$(timeout 120 $py "$here/py/torch_gpt2.py" --batch $B --steps $ours_steps --precision fp32 --peak-tflops "$peak" 2>&1 | tail -1)
echo "$torch_fp32"
ratio() { $py -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2f' % (a/b) if b>0 else 'n/a')" "$1" "$2"; }
tb=$(echo "$torch_bf16" | awk '{for(i=1;i<NF;i++) if($i=="tokens/s") print $(i+1)}')
tf=$(echo "$torch_fp32" | awk '{for(i=1;i<NF;i++) if($i=="tokens/s") print $(i+1)}')
echo "ratio parallax bf16 / torch bf16: $(ratio "$ours_tps" "${tb:-0}")x (goal >= 1.0); parallax fp32 / torch fp32: $(ratio "$ours_fp32" "${tf:-0}")x"

section "4. equivalence on the GPU (fp32, 5 steps, loss within 1e-5 relative)"
small="--layers 2 --heads 4 --dim 128 --seq 64 --vocab 50257 --batch 8 --steps 5 --data $work/tok.bin"
timeout 120 "$bin/parallax-rank" --device cpu $small > "$work/cpu1.txt" 2> "$work/cpu1.err"
timeout 120 "$bin/parallax-rank" --device cuda $small > "$work/gpu1.txt" 2> "$work/gpu1.err"
port=$((29500 + RANDOM % 1000))
PX_WORLD_SIZE=2 PX_RANK=1 PX_MASTER_PORT=$port timeout 120 "$bin/parallax-rank" --device cuda $small > "$work/dp2_r1.txt" 2> "$work/dp2_r1.err" &
PX_WORLD_SIZE=2 PX_RANK=0 PX_MASTER_PORT=$port timeout 120 "$bin/parallax-rank" --device cuda $small > "$work/dp2.txt" 2> "$work/dp2.err"
wait
compare "1 CUDA rank vs 1 CPU rank" "$work/gpu1.txt" "$work/cpu1.txt" || { fail=1; tail -5 "$work/gpu1.err"; }
compare "dp=2 on one GPU vs 1 CUDA rank" "$work/dp2.txt" "$work/gpu1.txt" || { fail=1; tail -5 "$work/dp2.err"; }
timeout 120 "$bin/parallax-rank" --device cuda --precision bf16 $small > "$work/gpu1b.txt" 2> "$work/gpu1b.err"
timeout 120 "$bin/parallax-rank" --device cpu --precision bf16 $small > "$work/cpu1b.txt" 2> "$work/cpu1b.err"
compare "bf16 1 CUDA rank vs fp32 1 CUDA rank" "$work/gpu1b.txt" "$work/gpu1.txt" 1e-2 || { fail=1; tail -5 "$work/gpu1b.err"; }
compare "bf16 1 CUDA rank vs bf16 1 CPU rank" "$work/gpu1b.txt" "$work/cpu1b.txt" 1e-3 || { fail=1; tail -5 "$work/cpu1b.err"; }
PX_CUDA_ATTN=cudnn timeout 120 "$bin/parallax-rank" --device cuda --precision bf16 $small > "$work/gpu1d.txt" 2> "$work/gpu1d.err"
grep -m2 -i 'cudnn' "$work/gpu1d.err"
compare "bf16 1 CUDA rank, PX_CUDA_ATTN=cudnn vs tensor-core attention" "$work/gpu1d.txt" "$work/gpu1b.txt" 1e-3 || { fail=1; tail -5 "$work/gpu1d.err"; }

section "5. collectives busbw (GB/s), 2 ranks"
echo "-- px-ipc-check: dp=2 ranks on GPU 0, device buffers through CUDA IPC vs staged vs host, bit for bit"
timeout 150 "$bin/px-ipc-check" -n 2 --device cuda > "$work/ipc_check.txt" 2>&1; rc=$?
tail -6 "$work/ipc_check.txt"
[ $rc -eq 0 ] || { echo "px-ipc-check: exit $rc; its failed cases and errors:"
                   grep -E '^(rank [0-9]+:|px_launch:)' "$work/ipc_check.txt" | head -20; fail=1; }
for op in all_reduce all_gather; do
  echo "-- px-coll-bench $op, host buffers"
  timeout 90 "$bin/px-coll-bench" -n 2 --op "$op" -b 1M -e 256M -f 4 2>&1 | tail -8 | tee "$work/host_$op.txt"
  echo "-- px-coll-bench $op, device buffers staged (PX_IPC=0: through pinned host memory in 4 MiB chunks, copies on a copy stream)"
  PX_IPC=0 timeout 120 "$bin/px-coll-bench" -n 2 --device cuda --op "$op" -b 1M -e 256M -f 4 2>&1 | tail -8 | tee "$work/stage_$op.txt"
  echo "-- px-coll-bench $op, device buffers through CUDA IPC (both ranks on GPU 0: device-to-device copies, device reduction)"
  timeout 120 "$bin/px-coll-bench" -n 2 --device cuda --op "$op" -b 1M -e 256M -f 4 2>&1 | tail -8 | tee "$work/dev_$op.txt"
  h=$(awk '$1 == 67108864 {print $7}' "$work/host_$op.txt")
  st=$(awk '$1 == 67108864 {print $7}' "$work/stage_$op.txt")
  d=$(awk '$1 == 67108864 {print $7}' "$work/dev_$op.txt")
  echo "$op 64 MiB busbw: device IPC $d GB/s, device staged $st GB/s, host $h GB/s; IPC/staged $(ratio "${d:-0}" "${st:-0}")x, IPC/host $(ratio "${d:-0}" "${h:-0}")x (goal >= 0.9)"
done
echo "-- NCCL through torch.distributed"
timeout 260 $py "$here/py/nccl_bench.py" 2>&1 | tail -12

section "done: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
