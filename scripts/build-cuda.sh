#!/usr/bin/env bash
# Builds om4-train (crates/om4-train) with Burn's CUDA backend offline (no download at build time).
#
# Burn 0.22's CUDA backend compiles kernels with LLVM (cubecl-llvm), whose build normally
# downloads an LLVM bundle. tracel-llvm-bundler skips that download when
# $XDG_DATA_HOME/tracel/tracel-llvm-23.1.0-4/.tracel-llvm-installed exists, and cubecl-llvm then
# runs that directory's bin/llvm-config --link-static. The PyPI wheels mlc-llvm-static and
# mlc-llvm-static-extra-targets (23.1.1.post0) are such an LLVM 23.1.1 static SDK (all targets
# incl. NVPTX). This script fetches them with pip (PyPI only), unpacks them under target/ (never
# $HOME), seeds the directory and builds in its own target dir (target/cuda; the first build takes
# about 30 minutes on 2 cores). Idempotent: a second run reuses the SDK and the build.
#
# Usage: scripts/build-cuda.sh [extra cargo args]   (prints the om4-train binary's path last;
#        scripts/gpu-check.sh prepare builds it this way)
# Env:   CUDARC_CUDA_VERSION (default 13000: CUDA 13.0, what driver 580 speaks; without nvcc
#        cudarc would otherwise pick the newest driver API it knows).
# With network access to tracel's servers none of this is needed:
#        cargo build --release -p om4-train --features cuda
set -euo pipefail
cd "$(dirname "$0")/.."
version=23.1.1.post0
sdk="$PWD/target/cuda-sdk"
seed="$sdk/xdg/tracel/tracel-llvm-23.1.0-4"

if [ ! -f "$seed/.tracel-llvm-installed" ]; then
  echo "== LLVM $version static SDK from PyPI into $sdk"
  mkdir -p "$sdk/wheels"
  python3 -m pip download --quiet --no-deps -d "$sdk/wheels" \
    "mlc-llvm-static==$version" "mlc-llvm-static-extra-targets==$version"
  rm -rf "$sdk/unpacked"
  mkdir -p "$sdk/unpacked"
  for wheel in "$sdk"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$sdk/unpacked"
  done
  chmod +x "$sdk"/unpacked/mlc_llvm_static/static/bin/*
  mkdir -p "$(dirname "$seed")"
  ln -sfn "$sdk/unpacked/mlc_llvm_static/static" "$seed"
  touch "$seed/.tracel-llvm-installed"
fi
echo "== llvm-config $("$seed/bin/llvm-config" --version) (NVPTX: $("$seed/bin/llvm-config" --targets-built | tr ' ' '\n' | grep -c NVPTX))"

unset DOCS_RS
export XDG_DATA_HOME="$sdk/xdg"
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
echo "== cargo build --release -p om4-train --features cuda (target/cuda)"
cargo build --release --locked -p om4-train --features cuda --target-dir target/cuda "$@"
echo "$PWD/target/cuda/release/om4-train"
