#!/usr/bin/env bash
# The GPU checks of om4's staging path, for a machine with an NVIDIA driver (no CUDA toolkit
# needed: cudarc loads libcuda at run time). Runs, in one short pass:
#   - pinned allocation, asynchronous host-to-device copies on a stream, and reuse of a pinned
#     buffer only after its copy completed (the device must hold the second pattern exactly);
#   - a pooled pinned buffer read back through Burn bit for bit;
#   - pinned vs pageable host-to-device GB/s, and copy/compute overlap on two streams.
# Usage: scripts/gpu-check.sh [MiB per copy, default 256]
# A missing driver or device is a failure here (OM4_REQUIRE_GPU=1); CI runs the same tests
# without a GPU, where they only check that a missing driver is reported as an error.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi not found"
export OM4_REQUIRE_GPU=1 OM4_GPU_CHECK_MIB="${1:-256}"
cargo test --release --locked -p om4-pipeline --features pinned --test pinned -- --nocapture --test-threads 1
cargo test --release --locked -p om4-burn --features pinned --test cuda -- --nocapture --test-threads 1
