#!/usr/bin/env bash
# Builds the om4 wheel (crates/om4-python, maturin) and runs its pytest suite in a Python 3.12
# virtual environment made under target/python (maturin, pytest, and the store-writing stack and
# torch at upstream Samudra's pins: numpy 1.26.4, xarray 2025.1.2, zarr 2.18.7, numcodecs 0.15.1,
# torch 2.9.1, whose CPU tensors test om4.torch; from PyPI the first time: about 1 min, 7 GB).
#
#   scripts/python-check.sh                       # build (debug profile), install, om4's tests
#   scripts/python-check.sh --release             # the same with an optimized build
#   scripts/python-check.sh --venv-only           # only make the venv (CI makes it in the
#                                                 # background while Rust builds)
#   scripts/python-check.sh --upstream-src DIR    # and upstream's own tests against om4's module:
#       DIR/rust/crab_load/tests/test_extension.py in the same venv, and DIR/tests/test_rust_data.py
#       (-m "not cuda") in a venv with torch 2.9.1 (--torch-python, default the same venv), into
#       which DIR is installed (`pip install -e`, its dependencies from PyPI at upstream's pins)
#       beside the om4 wheel.
#       DIR is a checkout of upstream Samudra with its Rust loader (PR #800, 10bb945e or later).
#
# The interpreter: $OM4_PYTHON, else pyenv's newest 3.12, else python3.12, else python3 (the
# wheel is abi3 from Python 3.9; upstream Samudra needs 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug upstream="" torch_python=target/python/bin/python venv_only=""
while (($#)); do
  case $1 in
    --release) profile=release ;;
    --venv-only) venv_only=1 ;;
    --upstream-src) upstream=$(cd "$2" && pwd); shift ;;
    --torch-python) torch_python=$2; shift ;;
    *) echo "usage: $0 [--release | --venv-only] [--upstream-src DIR] [--torch-python PYTHON]" >&2; exit 2 ;;
  esac
  shift
done

base=${OM4_PYTHON:-}
if [[ -z $base ]]; then
  for candidate in "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 "$(command -v python3.12 || true)" "$(command -v python3)"; do
    if [[ -x $candidate ]] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null; then
      base=$candidate
    fi
    [[ -n $base ]] && break
  done
fi
[[ -n $base ]] || { echo "no Python 3.9+ found (set OM4_PYTHON)" >&2; exit 1; }

venv=target/python
py=$venv/bin/python
if ! "$py" -c 'import maturin, pytest, xarray, zarr, torch' 2>/dev/null; then
  echo "making $venv from $base ($("$base" --version))" >&2
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$py" -m pip install -q --disable-pip-version-check \
    "maturin>=1.9,<2" pytest "numpy==1.26.4" "xarray==2025.1.2" "zarr==2.18.7" "numcodecs==0.15.1" "torch==2.9.1"
fi

[[ -n $venv_only ]] && exit 0

flags=()
[[ $profile == release ]] && flags+=(--release --strip)
rm -rf target/wheels
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target} "$venv/bin/maturin" build --locked "${flags[@]}" \
  -m crates/om4-python/Cargo.toml -i "$py" -o target/wheels
"$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall target/wheels/om4-*.whl

# With OM4_S3_ENDPOINT set (eval "$(scripts/s3-server.sh)"), tests/test_s3.py reads from the local
# S3 server too; without it, those tests are skipped.
"$py" -m pytest -q -p no:cacheprovider crates/om4-python/tests

if [[ -n $upstream ]]; then
  py=$PWD/$py
  [[ $torch_python == /* ]] || torch_python=$PWD/$torch_python
  echo "== upstream's extension tests against om4's samudra_rust_loader" >&2
  (cd "$upstream" && "$py" -m pytest -q -p no:cacheprovider -o addopts='' rust/crab_load/tests/test_extension.py)
  [[ -x $torch_python ]] || { echo "$torch_python missing: run benches/step/step.py once, or pass --torch-python" >&2; exit 1; }
  "$torch_python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall target/wheels/om4-*.whl
  # Upstream Samudra and its dependencies, held to the pins its tests were written against.
  printf '%s\n' torch==2.9.1 torchvision==0.24.1 numpy==1.26.4 xarray==2025.1.2 zarr==2.18.7 numcodecs==0.15.1 \
    >target/python/upstream-pins.txt
  "$torch_python" -m pip install -q --disable-pip-version-check -c target/python/upstream-pins.txt -e "$upstream" 2>/dev/null
  "$torch_python" -c 'import samudra_rust_loader, om4; assert samudra_rust_loader.FlatOm4Reader is om4.FlatOm4Reader'

  echo "== upstream's tests/test_rust_data.py (CPU cases) with om4 as the extension" >&2
  (cd "$upstream" && "$torch_python" -m pytest -q -p no:cacheprovider -o addopts='' tests/test_rust_data.py -m "not cuda")
fi
