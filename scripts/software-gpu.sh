#!/usr/bin/env bash
# cubecl's code path on a software Vulkan device (Mesa's lavapipe: llvmpipe, a CPU), as CI runs it:
#
#   scripts/software-gpu.sh          # installs what is missing (apt), builds, then:
#   scripts/software-gpu.sh build    # (only that: CI builds first, then runs the checks in the
#   scripts/software-gpu.sh check    #  background beside its next steps)
#     1. om4-train ops --device wgpu: every operation of Samudra's training step, forward and
#        gradients, then clipping with Adam and whole training steps of the demo's network and
#        batch from the same weights, against Burn's CPU backend within the stated bound (exits 1
#        above it);
#     2. om4-train train on the demo store, a short epoch (3 training batches, then validation), on
#        the CPU and on the wgpu device, with fusion and autotune as users get them: the two runs'
#        losses must agree within OM4_SOFTWARE_GPU_RTOL (relative, default 1e-3). With
#        OM4_SOFTWARE_GPU_FULL=1 the demo's whole first epoch instead (26 batches; about 8 min on
#        2 cores with cold caches).
#
# Burn's `wgpu` feature (WGSL through naga) runs on lavapipe; its `vulkan` feature (cubecl's
# SPIR-V) crashes lavapipe's pipeline creation (docs/gpu.md). The build is the debug profile
# (Cargo.toml's opt-levels, except for the Burn crates this build compiles again anyway:
# scripts/software-gpu.toml says which and why) and --workspace; Burn's GPU features would change
# the features of crates everything shares, on the target side and on the host side (proc macros
# and build scripts), so that nearly every crate built again; om4-testkit pins those
# features in every workspace build (scripts/shared-features.py checks), so after `cargo test
# --workspace` this build compiles Burn's, cubecl's, wgpu's and om4's crates and reuses the rest.
# OM4_EXTRA_BUILD adds arguments to the build: CI's `--features om4/s3 --example train_samudra`
# makes it resolve features as its S3 step's test builds do (dev-dependencies on), which then
# reuse it.
#
# OM4_SOFTWARE_GPU_LEVEL sets cubecl's autotune level for both checks. Default minimal: on a CPU
# device tuning is mostly llvmpipe compiling each candidate kernel, and minimal's coarser shape
# keys tune fewer of them (the ops check from cold caches on 2 cores, measured alone: 315 s at
# minimal, 462-483 s at balanced; 457 s at minimal inside one CI run). Autotune itself stays on,
# as users get it.
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
case $phase in all | build | check) ;; *) echo "usage: scripts/software-gpu.sh [build | check]" >&2; exit 2 ;; esac
rtol=${OM4_SOFTWARE_GPU_RTOL:-1e-3}
out=target/software-gpu
mkdir -p "$out"

# lavapipe and the Vulkan loader (Debian: mesa-vulkan-drivers, libvulkan1).
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
fi
# Only lavapipe: no other ICD (a real GPU's) is picked, whatever the machine has.
export VK_ICD_FILENAMES VK_DRIVER_FILES
VK_ICD_FILENAMES=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json | head -1)
VK_DRIVER_FILES=$VK_ICD_FILENAMES
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}

bin=target/debug/om4-train
if [ "$phase" != check ]; then
  start=$(date +%s)
  read -ra extra <<<"${OM4_EXTRA_BUILD:-}"
  cargo build --locked --config scripts/software-gpu.toml --workspace --features om4-train/wgpu --bin om4-train "${extra[@]}"
  echo "build: $(( $(date +%s) - start )) s"
fi
[ "$phase" = build ] && exit 0
[ -x "$bin" ] || { echo "no $bin: run scripts/software-gpu.sh build first"; exit 1; }

export CUBECL_AUTOTUNE_LEVEL=${OM4_SOFTWARE_GPU_LEVEL:-minimal}
start=$(date +%s)
"$bin" ops --device wgpu | tee "$out/ops.md"
echo "ops check: $(( $(date +%s) - start )) s"

export OM4_DEMO_DIR="$out/demo"
run=(--epochs 1)
if [ -z "${OM4_SOFTWARE_GPU_FULL:-}" ]; then
  # The demo store (written by the first run), split into 3 training batches and 4 validation ones.
  printf 'data:\n  train_time: {end: "1958-04-01"}\n  val_time: {start: "1959-10-01"}\n' > "$out/short.yaml"
  run=(--epochs 1 --config "$out/short.yaml")
fi
"$bin" train "${run[@]}" --device cpu | tee "$out/cpu.log"
start=$(date +%s)
"$bin" train "${run[@]}" --device wgpu | tee "$out/wgpu.log"
echo "wgpu training run: $(( $(date +%s) - start )) s"

losses() { grep -o 'train loss [0-9.]*  val loss [0-9.]*' "$1" | awk '{print $3, $6}'; }
read -r cpu_train cpu_val <<<"$(losses "$out/cpu.log")"
read -r gpu_train gpu_val <<<"$(losses "$out/wgpu.log")"
python3 - "$cpu_train" "$cpu_val" "$gpu_train" "$gpu_val" "$rtol" <<'PY'
import sys
ct, cv, gt, gv, rtol = map(float, sys.argv[1:])
worst = max(abs(gt - ct) / abs(ct), abs(gv - cv) / abs(cv))
print(f"losses: cpu train {ct} val {cv}; wgpu train {gt} val {gv}; largest relative difference {worst:.2e} (bound {rtol:g})")
sys.exit(0 if worst <= rtol else 1)
PY
