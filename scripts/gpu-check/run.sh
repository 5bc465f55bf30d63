# `scripts/gpu-check.sh run`, on the device machine: unpacks the carry, runs the parts it holds
# (one file each, in the order below) and prints the table.

run() {
  set +e
  deadline=$((SECONDS + ${OM4_GPU_CHECK_BUDGET:-480}))
  work=/tmp/om4-gpu
  rm -rf "$work" && mkdir -p "$work/bin" "$work/src"
  for f in "$carry"/bin/*.xz; do
    unxz_to "$f" "$work/bin/$(basename "$f" .xz)" && chmod +x "$work/bin/$(basename "$f" .xz)"
  done
  untar "$carry/samudra-src.tar.xz" "$work/src"
  python=${OM4_GPU_CHECK_PYTHON:-python3}
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$carry"/wheels/*.whl
  export PYTHONPATH="$work/site" PYTHONUNBUFFERED=1
  # cubecl's NVPTX path needs libdevice from the CUDA install.
  for cuda in "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13.0 /opt/cuda; do
    if [ -n "$cuda" ] && [ -d "$cuda/nvvm/libdevice" ]; then export CUDA_PATH="$cuda"; break; fi
  done
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
  echo "CUDA_PATH=${CUDA_PATH:-unset}"
  export OM4_REQUIRE_GPU=1 OM4_GPU_CHECK_MIB=256 OM4_DEMO_DIR="$work/demo"
  dev=${OM4_GPU_CHECK_DEVICE:-cuda} model=${OM4_GPU_CHECK_MODEL:-v2} grid=${OM4_GPU_CHECK_GRID:-1deg}
  torch_device=cuda torch_grid=180x360
  if [ "$dev" = cpu ]; then torch_device=cpu torch_grid=90x180; fi
  log="$work/log"
  mkdir -p "$log"

  # The parts this carry holds the programs for, unless OM4_GPU_CHECK_PARTS names some.
  local held=""
  [ -f "$carry/bin/pinned.xz" ] && held+=" a"
  [ -f "$carry/bin/om4-train.xz" ] && held+=" c e g"
  [ -d "$carry/wheels-py" ] && held+=" h"
  [ -f "$carry/bin/om4-train-vulkan.xz" ] && held+=" f"
  parts=" ${OM4_GPU_CHECK_PARTS:-$held} "
  echo "parts:$parts(carry $carry)"
  want() { [[ $parts == *" $1 "* ]]; }
  losses() { grep -oE 'train loss [0-9.]+' "$1" | awk '{print $3}' | tr '\n' ' '; }
  # Two epochs' train losses within 1e-3 relative of the CPU run's.
  close() { python3 -c "import sys; g,c=[list(map(float,a.split())) for a in sys.argv[1:]]; sys.exit(0 if len(g)==len(c)==2 and all(abs(x-y)<=1e-3*abs(y) for x,y in zip(g,c)) else 1)" "$1" "$2"; }
  cpu=""

  parts_dir=scripts/gpu-check
  want a && . "$parts_dir/part-a.sh"
  want c && . "$parts_dir/part-c.sh"
  want e && . "$parts_dir/part-e.sh"
  want g && . "$parts_dir/part-g.sh"
  want c && . "$parts_dir/part-c-1deg.sh"
  want h && . "$parts_dir/part-h.sh"
  want f && . "$parts_dir/part-f.sh"

  echo
  echo "| check | result | measured |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/logs.tgz" -C "$work" log; printf '%s\n' "${rows[@]}" > "$OUT/table.md"
    # cubecl's autotune and compilation caches (under the workspace's target/environment, as the
    # binaries run from the repository root): unpack into target/ here and carry
    # target/environment next time, so a later run's first batch skips the tuning.
    if [ -d target/environment ]; then tar -czf "$OUT/cubecl-environment.tgz" -C target environment; fi
  fi
  exit "$failed"
}

