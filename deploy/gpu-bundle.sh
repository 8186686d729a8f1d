#!/usr/bin/env bash
# Builds parallax with CUDA here and packs what deploy/gpu-check.sh needs on a
# GPU machine that has the CUDA driver/runtime, cuBLAS and PyTorch but no
# Debian packages: the binaries (parallax-rank, px-opcheck, px-coll-bench,
# px-ipc-check, parallaxd and pctl for the daemon section),
# the non-CUDA shared libraries they load (found with ldd: UCX with its
# transport modules, libuv, gRPC, protobuf-c, SQLite, OpenBLAS, jansson,
# inih, libsystemd ...; not glibc, not the CUDA libraries, not cuDNN or NCCL,
# which the GPU machine has), the sections' Python drivers (tests/gpu/*.py
# with the launcher they share, tests/engine/zero_util.py and
# tests/pxport.py) and gpu-check.sh itself. The folder must stay under 60 MiB.
#
# Usage: deploy/gpu-bundle.sh [OUT_DIR]   (default: <repo>/gpu-bundle)
#   PX_BUILD_DIR  the CUDA build directory (default: <repo>/build)
#   (an existing build directory is reconfigured with -Dcuda=enabled: give a
#   CUDA one of its own, e.g. PX_BUILD_DIR=build-cuda)
# Then: copy OUT_DIR to the GPU machine and run OUT_DIR/gpu-check.sh there
# (all sections, about 7 minutes), or OUT_DIR/gpu-check.sh SECTION... for some
# (ops layouts daemon attn coll profile speed); --sim tries the sections that
# have a CPU form on a machine without a GPU.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}
out=${1:-$root/gpu-bundle}
limit_mib=60

# nvcc where the CUDA toolkit puts it, when it is not on PATH already
command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null 2>&1 || { echo "gpu-bundle: nvcc not found (CUDA toolkit at /usr/local/cuda?)" >&2; exit 1; }

if [ -f "$build/build.ninja" ]; then
  meson configure "$build" -Dcuda=enabled >/dev/null
else
  meson setup "$build" "$root" -Dcuda=enabled
fi
ninja -C "$build" rank/parallax-rank tests/gpu/px-opcheck transport/tools/px-coll-bench \
  tests/transport/px-ipc-check daemon/parallaxd client/pctl
grep -q '#define PX_HAVE_CUDA 1' "$build/px_config.h" || { echo "gpu-bundle: $build has no CUDA backend" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/lib/ucx" "$out/py"
bins=("$build/rank/parallax-rank" "$build/tests/gpu/px-opcheck" "$build/transport/tools/px-coll-bench"
      "$build/tests/transport/px-ipc-check" "$build/daemon/parallaxd" "$build/client/pctl")
for b in "${bins[@]}"; do
  cp "$b" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$b")"
done

# UCX loads its transports (shm, tcp, cma ...) from <libdir of libucs>/ucx
ucxmods=$(dirname "$(ldconfig -p | awk '/libucs\.so\.0 .*x86-64/ {print $NF; exit}')")/ucx
for m in "$ucxmods"/libuct_{cma,tcp,sysv,posix,xpmem}.so* "$ucxmods"/libucm_*.so*; do
  [ -e "$m" ] && cp -L "$m" "$out/lib/ucx/" || true
done

# the libraries every packed object needs, except the C library and the CUDA
# ones the GPU machine has (its driver's and its toolkit's must match)
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcudnn|libnccl|libnvidia|libnvrtc)'
objs=("$out"/bin/* "$out"/lib/ucx/*)
declare -A seen=()
while ((${#objs[@]})); do
  o=${objs[0]}; objs=("${objs[@]:1}")
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [ -n "${seen[$name]:-}" ] && continue
    [ -f "$path" ] || { echo "gpu-bundle: $o needs $name, not found" >&2; exit 1; }
    seen[$name]=1
    cp -L "$path" "$out/lib/$name"
    strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
    objs+=("$out/lib/$name")
  done < <(ldd "$o" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done

cp "$root/deploy/gpu-check.sh" "$out/"
cp "$root"/tests/gpu/{make_tokens,torch_gpt2,speed,sdpa_bench,nccl_bench,coll,layouts,daemon_check,ncu_profile}.py \
  "$root/tests/engine/zero_util.py" "$root/tests/pxport.py" "$out/py/"
# every driver parses and finds the modules it imports
for f in "$out"/py/*.py; do
  python3 -m py_compile "$f" || { echo "gpu-bundle: $f does not compile" >&2; exit 1; }
done
rm -rf "$out/py/__pycache__"
python3 "$out/py/layouts.py" --list > /dev/null || { echo "gpu-bundle: py/layouts.py cannot import its launcher" >&2; exit 1; }
git -C "$root" rev-parse HEAD > "$out/COMMIT" 2>/dev/null || true

# Files over 4 MiB travel xz-compressed: libraries (OpenBLAS's every-CPU
# build is 35 MiB) and the binaries that carry CUDA kernels (9-10 MiB each,
# 1.7 MiB packed). gpu-check.sh unpacks them with Python's lzma (the GPU
# machine may have no xz) into its work folder, first thing: lib/X.xz into
# its lib/, bin/X.xz into its bin/ beside copies of the other binaries.
for f in "$out"/lib/* "$out"/bin/*; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt $((4 << 20)) ] && xz -T2 -6 "$f"
done

# the binaries must start with the bundle's libraries alone, unpacked as
# gpu-check.sh unpacks them
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
mkdir -p "$unpacked/lib" "$unpacked/bin"
for z in "$out"/lib/*.xz "$out"/bin/*.xz; do
  [ -e "$z" ] || continue
  d=$unpacked/$(basename "$(dirname "$z")")
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$z" "$d/$(basename "$z" .xz)"
done
chmod +x "$unpacked"/bin/*
for b in "$out"/bin/*; do
  case "$b" in *.xz) ;; *) cp "$b" "$unpacked/bin/" ;; esac
done
libs="$out/lib:$unpacked/lib"
for b in "$unpacked"/bin/*; do
  LD_LIBRARY_PATH="$libs" "$b" --help >/dev/null 2>&1 || {
    # px-opcheck has no --help: usage is exit 2; anything but a loader failure is fine
    rc=$?
    if LD_LIBRARY_PATH="$libs" ldd "$b" | grep -q "not found"; then
      echo "gpu-bundle: $(basename "$b") misses libraries:" >&2
      LD_LIBRARY_PATH="$libs" ldd "$b" | grep "not found" >&2
      exit 1
    fi
    [ "$rc" -le 2 ] || { echo "gpu-bundle: $(basename "$b") --help exited $rc" >&2; exit 1; }
  }
done

# ... and every library they resolve, except the C library and the CUDA
# ones, comes from the bundle (not from this machine's /usr/lib)
for o in "$unpacked"/bin/* "$out"/lib/ucx/*; do
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    case "$path" in "$out"/lib/*|"$unpacked"/lib/*) ;; *)
      echo "gpu-bundle: $(basename "$o") loads $name from $path, outside the bundle" >&2; exit 1 ;;
    esac
  done < <(LD_LIBRARY_PATH="$libs" ldd "$o" | awk '$2 == "=>" {print $1, $3}')
done
# the packed UCX and its modules work: a 2-rank all-reduce on host buffers
LD_LIBRARY_PATH="$libs" "$unpacked/bin/px-coll-bench" -n 2 -b 1M -e 1M -c -i 3 -w 1 \
  > "$unpacked/bench.txt" 2>&1 || { echo "gpu-bundle: px-coll-bench from the bundle failed:" >&2; cat "$unpacked/bench.txt" >&2; exit 1; }

mib=$(du -sm "$out" | cut -f1)
echo "gpu-bundle: $out: $(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries, ${mib} MiB;" \
  "each binary starts (--help) with LD_LIBRARY_PATH=$out/lib + its unpacked .xz only"
# the check itself from the bundle, in its CPU form: the collectives section
# on the fake device (gpu-check.sh's unpacking, arguments, section runner)
"$out/gpu-check.sh" --sim coll > "$unpacked/check.txt" 2>&1 ||
  { echo "gpu-bundle: gpu-check.sh --sim coll from the bundle failed:" >&2; tail -20 "$unpacked/check.txt" >&2; exit 1; }
if [ "$mib" -ge "$limit_mib" ]; then
  echo "gpu-bundle: $out is ${mib} MiB, over the ${limit_mib} MiB limit" >&2
  exit 1
fi
