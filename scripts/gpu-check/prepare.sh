# `scripts/gpu-check.sh prepare`: builds and packs the device runs' carries (no GPU needed).

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

