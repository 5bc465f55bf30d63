#!/usr/bin/env bash
# om4's GPU checks as two prepared device runs.
#
#   scripts/gpu-check.sh prepare   # here (no GPU needed): builds, packs target/gpu-carry and
#                                  # target/gpu-carry-2 (each fits a device run's 64 MiB)
#   scripts/gpu-check.sh run       # on the GPU machine (no Rust, no network), carrying
#                                  # target/gpu-carry: the CUDA parts (a c e g); then again with
#                                  # OM4_GPU_CHECK_CARRY=target/gpu-carry-2: the wheel and Vulkan
#                                  # (h f). Each prints one table and exits 1 if a check failed.
#
# `prepare` builds, strips and xz-compresses (one CUDA binary carries every GPU check):
#   - om4-train (crates/om4-train) with Burn's CUDA backend (scripts/build-cuda.sh: offline LLVM SDK),
#   - om4-train with the Vulkan backend (target/vulkan),
#   - the om4 CLI (to write a synthetic 1° store there),
#   - om4-pipeline's tests/pinned.rs and om4-burn's tests/cuda.rs (feature pinned: cudarc only),
# and packs upstream Samudra's model source (m2lines/Samudra 018a6a7, from the git directory in
# $SAMUDRA_GIT, e.g. a `fetch` mirror) with the Python packages its import needs that the
# device's image lacks (PyPI wheels for CPython 3.12); for part h, the om4 wheel (release,
# stripped; scripts/python-check.sh --release builds it and runs its suite here), upstream's
# PR #800 checkout (10bb945e: src, tests, configs, pyproject.toml) and the packages its loader and
# tests import that the image lacks or has at versions that break them (zarr 2 needs xarray
# 2025.1 and pandas 2), with wandb (27 MB) stood in for by scripts/gpu/sitecustomize.py. The
# carried folder and the working tree must stay under a device run's 64 MiB (checked).
#
# `run` (at most OM4_GPU_CHECK_BUDGET = 480 s: each part has its own timeout, cut to what is left
# of the budget; a part with no time left is a SKIP row):
#   a. staging: pinned allocation, async copies, reuse only after the copy completed, pinned vs
#      pageable GB/s; d. copy/compute overlap (both from tests/pinned.rs); pinned loader batches
#      through Burn equal pageable ones (tests/cuda.rs);
#   b. om4-train prepare --device cuda: device-prepared batches equal the host reference bit for bit;
#   c. om4-train ops --device cuda (every step operation, clip + Adam and whole steps against flex,
#      bound 1e-2 for TF32); the demo trained 2 epochs on cuda and on cpu (train losses within 1e-3
#      relative; its first batch split into autotune, compilation and the rest), then v2
#      at 1° (hist 1, 4 steps, batch 1 and 4, and 4 with --bf16): samples/s, data wait p50/p95 and
#      share, peak GPU memory;
#   e. om4's v2 optimizer step against upstream PyTorch Samudra's on the same GPU, batch 1 and 4,
#      float32 and bf16, in interleaved rounds (benches/step/step.py with scripts/gpu/torch_step.py);
#   f. the Vulkan build of om4-train trains the demo (Debian's libvulkan1 carried as a package);
#   g. forward parity at 1° on the device: tests/data/upstream/check_forward_1deg.py (independent
#      case) with `om4-train forward --device cuda` against upstream's float64 forward in torch
#      (on the GPU, TF32 off), bound 1e-5, beside torch's own float32 error;
#   h. the Python wheel on the GPU: om4's pytest suite with pin_memory required to work; upstream
#      Samudra's (PR #800, 10bb945e) CUDA cases of tests/test_rust_data.py with om4 as its
#      samudra_rust_loader; om4's test_torch.py on the GPU (the device path and the resident split
#      equal to the host path bit for bit); benches/python/loader.py --device cuda at the small
#      case and at v2's settings (upstream's CUDA prefetch against om4's host, device and resident
#      paths, batches delivered on the GPU; step overhead, exposed wait, MB copied, event-timed
#      copy GB/s, pinned allocations).
# A run does the parts its carry holds, in the order a c e g h f (part c's v2 rows after g);
# OM4_GPU_CHECK_PARTS="a e" (say) runs those only ("a" is a, d and b); OM4_GPU_CHECK_STEP_CASES
# (default "1 4 4:bf16": batch[:bf16]) sets part e's cases, OM4_GPU_CHECK_PROFILE=0 skips its profile.
# Training rows report the first batch (kernel compilation, and autotune with the cuda/vulkan
# features' burn/autotune) apart from the steady batches after it. cubecl keeps its autotune and
# compilation caches in target/environment: `run` returns them as $OUT/cubecl-environment.tgz;
# unpack that under target/ here and add target/environment to the next run's carry.
# A dry run of `run` without a GPU (the plumbing; GPU rows then fail as they should):
#   OM4_GPU_CHECK_DEVICE=cpu OM4_GPU_CHECK_MODEL=tiny OM4_GPU_CHECK_GRID=2deg \
#   OM4_GPU_CHECK_PYTHON=target/torch-venv/bin/python OM4_GPU_CHECK_ROUNDS=2 scripts/gpu-check.sh run
# (a Python 3.12 with torch, e.g. a venv with torch==2.9.1 from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=${OM4_GPU_CHECK_CARRY:-target/gpu-carry}
upstream_commit=018a6a7453bd2b600daffcc971af964102ab90a1
loader_commit=10bb945e6225093744abb53b7da7b8634a9fe30f  # upstream's Rust loader, PR #800

prepare() {
  : "${SAMUDRA_GIT:?set SAMUDRA_GIT to a git directory of m2lines/Samudra holding $upstream_commit and $loader_commit}"
  local all=target/gpu-build
  rm -rf "$all" target/gpu-carry target/gpu-carry-2
  mkdir -p "$all/bin" "$all/wheels" "$all/wheels-py" "$all/gl"
  scripts/build-cuda.sh
  cargo build --release --locked --bin om4
  tests=$(cargo test --release --locked -p om4-pipeline -p om4-burn --features om4-pipeline/pinned,om4-burn/pinned \
    --test pinned --test cuda --no-run --message-format=json |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test) | .executable')
  # The Vulkan build of om4-train (wgpu, no LLVM), and the Vulkan loader the device image lacks.
  cargo build --release --locked -p om4-train --features vulkan --target-dir target/vulkan
  cp target/vulkan/release/om4-train target/vulkan/om4-train-vulkan
  mkdir -p /tmp/om4-apt-amd64/partial
  apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/om4-apt-amd64)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$all/gl" && apt-get "${apt_opts[@]}" download -qq libvulkan1)
  for bin in target/cuda/release/om4-train target/vulkan/om4-train-vulkan target/release/om4 $tests; do
    name=$(basename "$bin" | sed 's/-[0-9a-f]\{16\}$//')
    strip -o "$all/bin/$name" "$bin"
    xz -T2 -9 -f "$all/bin/$name"
  done
  git --git-dir="$SAMUDRA_GIT" archive --format=tar --prefix=src/ "$upstream_commit:src" samudra | xz -6 > "$all/samudra-src.tar.xz"
  # What upstream's model import needs beyond the device image (torch, numpy, xarray, yaml, einops,
  # jaxtyping are there), at the versions of upstream's uv.lock (found by importing it in a
  # Python 3.12 venv with torch 2.9.1 on this machine; scripts/gpu/torch_step.py ran there on CPU).
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$all/wheels" pydantic==2.10.6 pydantic-core==2.27.2 pydantic-settings==2.8.1 annotated-types==0.7.0 \
    python-dotenv==1.1.0 dacite==1.9.2 cftime==1.6.4.post1 xarray-einstats==0.8.0 torchinfo==1.8.0
  # Part h: the wheel, upstream's Rust-loader checkout, and what its loader's tests import beyond
  # the image and the wheels above (found by importing them in a Python 3.12 venv here, numpy 2).
  scripts/python-check.sh --release
  cp target/wheels/om4-*.whl "$all/wheels-py/"
  git --git-dir="$SAMUDRA_GIT" archive --format=tar "$loader_commit" src/samudra tests configs/test pyproject.toml |
    xz -6 > "$all/samudra-loader.tar.xz"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$all/wheels-py" pandas==2.2.3 pytz==2026.6 tzdata==2026.6 xarray==2025.1.2 zarr==2.18.7 \
    numcodecs==0.15.1 asciitree==1.0.0 fasteners==0.20 dask==2025.2.0 partd==1.4.2 locket==1.0.0 \
    deprecated==3.0.1 microsoft-aurora==2.0.1 perceiver-pytorch==0.11.0
  # Two device runs' carries, each under 64 MiB with the working tree: the CUDA parts (a c e g),
  # then the Python wheel and Vulkan (h f). `run` runs the parts its carry holds.
  pack target/gpu-carry bin/om4-train.xz bin/pinned.xz bin/cuda.xz bin/om4.xz samudra-src.tar.xz wheels
  pack target/gpu-carry-2 bin/om4-train-vulkan.xz bin/om4.xz gl samudra-src.tar.xz wheels wheels-py samudra-loader.tar.xz
  echo "on the device: scripts/gpu-check.sh run (carry target/gpu-carry), then the same with"
  echo "OM4_GPU_CHECK_CARRY=target/gpu-carry-2 (carry target/gpu-carry-2 and target/environment)"
}

# Copies the named parts of target/gpu-build into a carry folder; fails if it and the working tree
# exceed a device run's 64 MiB.
pack() {
  local to=$1 size tree
  shift
  mkdir -p "$to/bin"
  for item in "$@"; do cp -r "target/gpu-build/$item" "$to/$item"; done
  size=$(du -sb "$to" | cut -f1)
  tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  echo "$to: $((size >> 20)) MiB (+ working tree $((tree >> 20)) MiB)"
  if [ $((size + tree)) -gt $((63 << 20)) ]; then
    echo "$to ($size bytes) and the working tree ($tree) exceed a device run's 64 MiB"; exit 1
  fi
}

# One table row per check: name, PASS/FAIL/INFO, what was measured.
rows=()
failed=0
row() {
  rows+=("$(printf '| %-34s | %-4s | %s |' "$1" "$2" "$3")")
  if [ "$2" = FAIL ]; then failed=1; fi
}
# A FAIL row, or SKIP when the part did not run for lack of time (status 125).
fail() {
  if [ "$2" = 125 ]; then row "$1" SKIP "no time left in the run's budget"; else row "$1" FAIL "$3"; fi
}

# Seconds for a part: its own limit, or what is left of the run's budget (OM4_GPU_CHECK_BUDGET,
# default 480 s, inside the device's 10-minute command limit); 0 when too little is left.
budget() {
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# Runs a part under `budget`; a part with no time left is a SKIP row instead.
part() {
  local limit
  limit=$(budget "$1")
  shift
  if [ "$limit" = 0 ]; then return 125; fi
  timeout "$limit" "$@"
}

# xz archives unpacked by Python's lzma where the machine has no xz.
unxz_to() { xz -dc "$1" > "$2" 2>/dev/null || python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
untar() { [ -f "$1" ] && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }

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

  # a + d: staging and overlap; pinned loader batches through Burn.
  if want a; then
    if part 120 "$work/bin/pinned" --nocapture --test-threads 1 > "$log/pinned.txt" 2>&1; then
      row "a/d. pinned staging, overlap" PASS "$(grep -iE 'GB/s|overlap' "$log/pinned.txt" | tr '\n' ' ' | cut -c1-200)"
    else fail "a/d. pinned staging, overlap" "$?" "see pinned.txt: $(tail -3 "$log/pinned.txt" | tr '\n' ' ')"; fi
    if part 120 "$work/bin/cuda" --nocapture --test-threads 1 > "$log/cuda-test.txt" 2>&1; then
      row "a. pinned loader batches via Burn" PASS "equal to pageable ones bit for bit"
    else fail "a. pinned loader batches via Burn" "$?" "$(tail -3 "$log/cuda-test.txt" | tr '\n' ' ')"; fi
    # b: device preparation equals the host reference.
    if part 300 "$work/bin/om4-train" prepare --device "$dev" > "$log/prepare.txt" 2>&1; then
      row "b. prepare on $dev = host" PASS "$(tail -1 "$log/prepare.txt")"
    else fail "b. prepare on $dev = host" "$?" "$(tail -2 "$log/prepare.txt" | tr '\n' ' ')"; fi
  fi

  # c: every operation of the step and whole steps against flex (TF32 convolutions and matmuls on
  # CUDA: bound 1e-2), then the demo on cuda and cpu (v2 at 1° comes after e and g).
  if want c; then
    if part 300 "$work/bin/om4-train" ops --device "$dev" --tolerance "${OM4_GPU_CHECK_OPS_TOL:-1e-2}" > "$log/ops.txt" 2>&1; then
      row "c. ops on $dev vs flex" PASS "$(grep -c '| yes |' "$log/ops.txt") rows within the bound (ops.txt)"
    else fail "c. ops on $dev vs flex" "$?" "$(grep '| NO |' "$log/ops.txt" | head -2 | tr '\n' ' ')"; fi
    part 300 "$work/bin/om4-train" train --device "$dev" --epochs 2 > "$log/demo-cuda.txt" 2>&1
    part 300 "$work/bin/om4-train" train --device cpu --epochs 2 > "$log/demo-cpu.txt" 2>&1
    gpu=$(losses "$log/demo-cuda.txt"); cpu=$(losses "$log/demo-cpu.txt")
    if [ -n "$gpu" ] && close "$gpu" "$cpu"; then
      row "c. demo $dev vs cpu (2 epochs)" PASS "train loss $dev $gpu/ cpu $cpu(1e-3 rel.)"
    else fail "c. demo $dev vs cpu (2 epochs)" "$?" "$dev [$gpu] cpu [$cpu]: $(tail -2 "$log/demo-cuda.txt" | tr '\n' ' ')"; fi
  fi

  # e: om4's optimizer step against upstream PyTorch's on the same device, side by side in
  # interleaved rounds (benches/step/step.py: both resident, warmed up, then alternating).
  if want e; then
    cases=()
    for c in ${OM4_GPU_CHECK_STEP_CASES:-1 4 4:bf16}; do cases+=(--case "$model:$torch_grid:$c"); done
    out=$(part 300 python3 benches/step/step.py --upstream-src "$work/src/src" --python "$python" \
      --om4 "$work/bin/om4-train" --device "$torch_device" --rounds "${OM4_GPU_CHECK_ROUNDS:-5}" \
      --json "$log/step-bench.json" "${cases[@]}" 2> "$log/step-bench.txt")
    status=$?
    if [ "$status" = 0 ]; then
      while IFS= read -r line; do
        case "$line" in "| $model "*) row "e. step om4 vs pytorch" INFO "${line#| }";; esac
      done <<< "$out"
    else fail "e. step om4 vs pytorch" "$status" "exit $status: $(tail -2 "$log/step-bench.txt" | tr '\n' ' ')"; fi
    # Where om4's step spends its time on the device: each phase and operation alone, synchronized.
    if [ "${OM4_GPU_CHECK_PROFILE:-1}" = 0 ]; then
      row "e. step profile ($model, batch 4)" SKIP "OM4_GPU_CHECK_PROFILE=0"
    elif part 120 "$work/bin/om4-train" step --profile --device "$dev" --preset "$model" --grid "$torch_grid" \
      --batch 4 --repeats 3 > "$log/profile.txt" 2>&1; then
      row "e. step profile ($model, batch 4)" INFO "$(grep -ciE 'ms|s$' "$log/profile.txt") lines in profile.txt"
    else fail "e. step profile ($model, batch 4)" "$?" "$(tail -2 "$log/profile.txt" | tr '\n' ' ')"; fi
  fi

  # g: forward parity with upstream at 1° on the device (the instance-norm presets and v2).
  if want g; then
    part 180 python3 tests/data/upstream/check_forward_1deg.py --upstream-src "$work/src/src" \
      --forward-bin "$work/bin/om4-train forward --device $dev" --torch-device "$torch_device" \
      --case independent --presets "${OM4_GPU_CHECK_FORWARD:-tiny,v2_highres,v2}" --work "$work/forward" \
      > "$log/forward.txt" 2>&1
    status=$?
    errors=$(grep -oE '^[a-z0-9_]+ \(independent\): max[^[]*' "$log/forward.txt" | sed 's/max|om4 - ref| \/ max|ref| = //' | tr '\n' ';')
    if [ "$status" = 0 ]; then row "g. forward parity 1° on $dev" PASS "$errors"
    else fail "g. forward parity 1° on $dev" "$status" "exit $status: $errors $(tail -2 "$log/forward.txt" | tr '\n' ' ')"; fi
  fi

  # c, continued: v2 at 1° (hist 1, 4 steps, batch 1 and 4, and 4 in bf16).
  if want c; then
    "$work/bin/om4" synth "$work/1deg" --grid "$grid" --times 20 > "$log/synth.txt" 2>&1
    for run in 1 4 "4 --bf16"; do
      batch=${run%% *} extra=${run#"$batch"}
      tag=${extra// /}
      (nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 || true) > "$log/mem-$batch.txt" 2>/dev/null &
      smi=$!
      part 240 "$work/bin/om4-train" train --device "$dev" --store "$work/1deg/OM4.zarr" --model "$model" --history 1 \
        --steps 4 --batch-size "$batch" --epochs 1 $extra > "$log/v2-b$batch$tag.txt" 2>&1
      status=$?
      kill "$smi" 2>/dev/null
      peak=$(sort -n "$log/mem-$batch.txt" | tail -1)
      line=$(grep -E '^epoch' "$log/v2-b$batch$tag.txt" | tail -1)
      first=$(grep -oE 'first batch .*' "$log/v2-b$batch$tag.txt" | tail -1)
      if [ "$status" = 0 ] && [ -n "$line" ]; then
        row "c. $model $grid steps 4 batch $batch$extra" INFO "${line#epoch   1: } peak ${peak} MiB; $first"
      else fail "c. $model $grid steps 4 batch $batch$extra" "$status" "exit $status: $(tail -2 "$log/v2-b$batch$tag.txt" | tr '\n' ' ')"; fi
    done
  fi

  # h: the Python wheel on the GPU, in its own site (upstream's loader stack at its pins).
  if want h; then
    pysite="$work/pysite" up="$work/samudra-loader"
    mkdir -p "$up" && untar "$carry/samudra-loader.tar.xz" "$up"
    "$python" -m pip install -q --no-index --no-deps --no-compile --target "$pysite" "$carry"/wheels/*.whl "$carry"/wheels-py/*.whl
    cp scripts/gpu/sitecustomize.py "$pysite/"
    pyenv=(env PYTHONPATH="$pysite:$up/src" OM4_REQUIRE_GPU=1)
    # test_torch.py on the GPU: the device path and the resident split equal the host path bit for
    # bit with batches pinned, copied and prepared there.
    if part 120 "${pyenv[@]}" OM4_TORCH_DEVICE="$torch_device" "$python" -m pytest -q -p no:cacheprovider \
      crates/om4-python/tests/test_loader.py crates/om4-python/tests/test_readers.py \
      crates/om4-python/tests/test_torch.py > "$log/py-om4.txt" 2>&1; then
      row "h. om4 wheel suite, pin_memory" PASS "$(tail -1 "$log/py-om4.txt")"
    else fail "h. om4 wheel suite, pin_memory" "$?" "$(tail -3 "$log/py-om4.txt" | tr '\n' ' ')"; fi
    if (cd "$up" && part 120 "${pyenv[@]}" "$python" -m pytest -q -p no:cacheprovider -o addopts='' \
      tests/test_rust_data.py -m cuda) > "$log/py-upstream-cuda.txt" 2>&1; then
      row "h. upstream's CUDA cases on om4" PASS "$(tail -1 "$log/py-upstream-cuda.txt")"
    else fail "h. upstream's CUDA cases on om4" "$?" "$(tail -3 "$log/py-upstream-cuda.txt" | tr '\n' ' ')"; fi
    "$work/bin/om4" synth "$work/py1deg" --grid "$grid" --times 60 > "$log/py-synth.txt" 2>&1
    # The small case (21 + 3 channels, 2 steps), then Samudra v2's settings (77 + 3, 4 steps).
    for case in "small:--levels 5 --steps 2 --rounds 3" "v2:--levels 19 --steps 4 --rounds 2"; do
      name=${case%%:*}
      # shellcheck disable=SC2086
      out=$(part 150 "${pyenv[@]}" "$python" benches/python/loader.py --upstream-src "$up" --patch-store \
        --device "$torch_device" --threads 8 --batches 4 --compute-ms 100 --train 1958-01-03..1958-08-01 \
        --val 1958-08-06..1958-09-20 ${case#*:} --json "$log/py-loader-gpu-$name.json" "$work/py1deg" \
        2> "$log/py-loader-gpu-$name.txt")
      status=$?
      echo "$out" >> "$log/py-loader-gpu-$name.txt"
      if [ "$status" = 0 ] && ! grep -q "bit for bit: False" "$log/py-loader-gpu-$name.txt"; then
        row "h. loader $name on $torch_device: first batches" PASS "$(grep -c 'bit for bit: True' "$log/py-loader-gpu-$name.txt") arrays equal upstream's bit for bit"
        while IFS= read -r line; do
          case "$line" in loader*|upstream*|om4*) row "h. loader $name on $torch_device" INFO "$line";; esac
        done <<< "$out"
      else fail "h. loader $name on $torch_device" "$status" "exit $status: $(tail -2 "$log/py-loader-gpu-$name.txt" | tr '\n' ' ')"; fi
    done
  fi

  if want f; then
    # f: the Vulkan build trains the demo (the loader from the carried Debian package).
    if [ "$dev" != cpu ]; then
      for f in "$carry"/gl/*.deb; do dpkg -x "$f" /; done
      ldconfig
    fi
    if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
      export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    fi
    vdev=vulkan
    if [ "$dev" = cpu ]; then vdev=cpu; fi
    if [ -z "$cpu" ]; then  # the CPU reference, from the Vulkan build when part c did not run
      part 300 "$work/bin/om4-train-vulkan" train --device cpu --epochs 2 > "$log/demo-cpu.txt" 2>&1
      cpu=$(losses "$log/demo-cpu.txt")
    fi
    if part 240 "$work/bin/om4-train-vulkan" train --device "$vdev" --epochs 2 > "$log/demo-vulkan.txt" 2>&1 &&
      vk=$(losses "$log/demo-vulkan.txt") && close "$vk" "$cpu"; then
      row "f. demo on $vdev (vulkan build)" PASS "train loss $vk/ cpu $cpu(1e-3 rel.)"
    else fail "f. demo on $vdev (vulkan build)" "$?" "$(tail -2 "$log/demo-vulkan.txt" | tr '\n' ' ')"; fi
  fi

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

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run"; exit 2 ;;
esac
