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
# One file per job: scripts/gpu-check/limits.sh (the device machine's limits, the table),
# prepare.sh (build and pack), run.sh (the device run) and part-*.sh (one per part).
. scripts/gpu-check/limits.sh
. scripts/gpu-check/prepare.sh
. scripts/gpu-check/run.sh

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run"; exit 2 ;;
esac
