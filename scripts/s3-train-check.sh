#!/usr/bin/env bash
# train_samudra trains from S3: one epoch on the demo store from its local folder, then from its
# copy in a bucket of the local S3 server (moto on 127.0.0.1, scripts/s3-server.sh), configured in
# Samudra's own form (`data_location: {type: s3, endpoint_url, anon, bucket, path}`), then from the
# same objects over plain HTTP (`{type: http, url}`); the three runs must print the same train and
# validation losses. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/s3-server.sh)"
# The debug build: Burn's kernels and the model run optimized in it too (Cargo.toml's dev profile),
# and CI builds no release binary for this check. OM4_EXTRA_BUILD adds arguments to the build
# (CI's `--features om4-train/wgpu`: the software-GPU step's build, which this one then reuses).
read -ra extra <<<"${OM4_EXTRA_BUILD:-}"
cargo build --locked --workspace --features om4/s3 --example train_samudra "${extra[@]}"   # --workspace: Burn's features as in the workspace's own build
bin=target/debug/examples/train_samudra
dir=target/s3-train-check
rm -rf "$dir"; mkdir -p "$dir"
# A third of the demo's training split (8 batches; moto serves about 1 s of data wait per batch),
# then its validation split.
split='  train_time: {end: "1958-09-01"}
  val_time: {start: "1959-07-01"}'
printf 'data:\n%s\n' "$split" > "$dir/short.yaml"
OM4_DEMO_DIR="$dir/demo" "$bin" --epochs 1 --config "$dir/short.yaml" >/dev/null   # writes the demo store (and trains the short epoch)
target/s3-server/venv/bin/python scripts/s3-upload.py "$OM4_S3_ENDPOINT" "$dir/demo" om4-train demo
common="$split
train: {epochs: 1, learning_rate: 0.002, steps: 2}"
cat > "$dir/local.yaml" <<YAML
data:
  data_location: $dir/demo/OM4.zarr
$common
YAML
# 64 requests in flight: moto's Python server slows down badly with many connections (om4's default is 512)
# (measured on the demo: data wait p50 795 ms at 256 in flight, 27 ms at 64, 50 ms at 128)
s3() { echo "{type: s3, endpoint_url: \"$OM4_S3_ENDPOINT\", anon: true, bucket: om4-train, path: demo/$1, requests: {concurrency: 64}}"; }
cat > "$dir/s3.yaml" <<YAML
data:
  data_location: $(s3 OM4.zarr)
  data_means_location: $(s3 OM4_means.zarr)
  data_stds_location: $(s3 OM4_stds.zarr)
$common
YAML
http() { echo "{type: http, url: \"$OM4_S3_ENDPOINT/om4-train/demo/$1\", requests: {concurrency: 64}}"; }
cat > "$dir/http.yaml" <<YAML
data:
  data_location: $(http OM4.zarr)
  data_means_location: $(http OM4_means.zarr)
  data_stds_location: $(http OM4_stds.zarr)
$common
YAML
"$bin" --config "$dir/local.yaml" | tee "$dir/local.log"
losses() { grep -o 'train loss [0-9.]*  val loss [0-9.]*' "$1"; }
for remote in s3 http; do
  "$bin" --config "$dir/$remote.yaml" | tee "$dir/$remote.log"
  if [ -z "$(losses "$dir/local.log")" ] || [ "$(losses "$dir/local.log")" != "$(losses "$dir/$remote.log")" ]; then
    echo "the epoch from $remote differs from the local one: $(losses "$dir/local.log") / $(losses "$dir/$remote.log")"; exit 1
  fi
done
echo "same losses from the local store, from S3 and over HTTP: $(losses "$dir/s3.log")"
