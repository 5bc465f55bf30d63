#!/usr/bin/env bash
# om4's library crates as a dependency, as they would reach a user from crates.io: packs them
# (`cargo package`, without its build: the build below is the check), unpacks the packages under
# target/dependent, points examples/dependent (a project outside the workspace, written only
# against the public API) at them, then type-checks it (`cargo check`: the packages' build scripts,
# sources and public API, as a build would see them, in a third of a build's time; the same code
# paths run in the workspace's own tests). With OM4_DEPENDENT_RUN=1 it builds and runs the project
# instead (one batch checked, one epoch of the tiny network on the demo store).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/dependent
rm -rf "$out" target/package
mkdir -p "$out/crates"
# --allow-dirty: what is packed is the working tree, as it stands (CI's clone is clean anyway).
cargo package --locked --allow-dirty --workspace --no-verify --exclude om4-python --exclude om4-testkit --exclude om4-train
for crate in target/package/*.crate; do
  tar -xzf "$crate" -C "$out/crates"
done
cp -r examples/dependent/src "$out/"
# The packed manifests name each other by version (as on crates.io); [patch] serves those
# versions from the unpacked packages, and the project's own paths point there too.
sed -E 's#version = "([^"]+)", path = "\.\./\.\./crates/([a-z0-9-]+)"#version = "\1", path = "crates/\2-\1"#' \
  examples/dependent/Cargo.toml > "$out/Cargo.toml"
{
  echo
  echo "[patch.crates-io]"
  for dir in "$out"/crates/*/; do
    name=$(basename "$dir" | sed -E 's/-[0-9]+\.[0-9]+\.[0-9]+$//')
    [ "$name" = om4 ] && continue   # the command-line tool, not a library
    echo "$name = { path = \"crates/$(basename "$dir")\" }"
  done
} >> "$out/Cargo.toml"
if grep -q '\.\./\.\./' "$out/Cargo.toml"; then
  echo "examples/dependent/Cargo.toml names a crate outside the packages:"; grep '\.\./\.\./' "$out/Cargo.toml"; exit 1
fi
cp Cargo.lock "$out/"   # the workspace's versions (cargo drops what the project does not use)
if [ -n "${OM4_DEPENDENT_RUN:-}" ]; then
  cargo build --manifest-path "$out/Cargo.toml" --target-dir target
  target/debug/om4-dependent "$out/demo"
else
  cargo check --manifest-path "$out/Cargo.toml" --target-dir target
fi
