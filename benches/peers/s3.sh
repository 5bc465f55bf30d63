#!/usr/bin/env bash
# om4 against TensorStore's S3 driver and zarr-python (obstore) on one local S3 server, with
# 0, 10 and 50 ms added to every request, one window at a time and three in flight: raw windows and
# Samudra batches on synthetic 1° stores (80 channels, 24 steps).
#   benches/peers/s3.sh            full run (writes docs/peers-s3.json, docs/peers-s3.png and the
#                                  tables between the peers-s3 markers of docs/benchmarks.md)
#   benches/peers/s3.sh --smoke    tiny stores, one latency: checks the harness end to end
#   benches/peers/s3.sh --sweep    om4 alone at 256–2048 requests in flight and at its own choice
#                                  (the table its automatic limit is checked by, between the
#                                  peers-s3-sweep markers)
# The server: benches/peers/s3-server (the s3s crate's S3 protocol over the stores' folder,
# signatures checked, each request answered 0/10/50 ms after it arrived; built into
# target/bench-s3) unless OM4_S3_BENCH_SERVER=moto: then scripts/s3-server.sh's moto, the stores
# uploaded, and benches/peers/latency_proxy.rs in front for the latency.
# Python peers in target/peers-s3/venv (pinned in requirements-s3.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=target/peers-s3
mkdir -p "$work/work"
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q -r benches/peers/requirements-s3.txt
fi
cargo build --release --locked --features s3 --bin om4 --example latency_proxy
om4=target/release/om4
mode="${1:-}"
if [ "$mode" = "--smoke" ]; then
  synth=(--ny 18 --nx 36 --times 12 --levels 2); latencies=10; levels=2; extra=(--windows 2 --in-flight 1,2 --rounds 1 --batch-sizes 1 --batches 1 --steps 2)
  out="$work/smoke.json"; tables="$work/smoke.md"; plot="$work/smoke.png"; stores_dir="$work/smoke-stores"
  printf '<!-- peers-s3:begin -->\n<!-- peers-s3:end -->\n' > "$tables"
else
  synth=(--grid 1deg --times 24); latencies=0,10,50; levels=19; extra=(--windows 6)
  [ "$mode" = --sweep ] && extra=(--sweep 256,512,1024,2048,auto --windows 6)
  out=docs/peers-s3.json; tables=docs/benchmarks.md; plot=docs/peers-s3.png; stores_dir="$work/stores"
fi
stores=()
for variant in "v2 blosc-lz4" "v3 blosc-lz4 --shard 6"; do
  set -- $variant
  name="$stores_dir/$1-$2${3:+-sharded}"
  if [ ! -f "$name/.done-${synth[*]// /_}" ]; then
    rm -rf "$name"
    "$om4" synth "$name" "${synth[@]}" --format "$1" --codec "$2" "${@:3}" >/dev/null
    touch "$name/.done-${synth[*]// /_}"
  fi
  stores+=(--store "$name")
done

server_args=()
if [ "${OM4_S3_BENCH_SERVER:-om4-bench-s3}" = moto ]; then
  eval "$(scripts/s3-server.sh)"
  server_args=(--endpoint "$OM4_S3_ENDPOINT" --server moto)
else
  cargo build --release --locked --manifest-path benches/peers/s3-server/Cargo.toml --target-dir target/bench-s3
  root="$work/bucket-root"; rm -rf "$root"; mkdir -p "$root/om4-bench"  # the bucket: links to the stores
  for s in "${stores[@]}"; do [ "$s" = --store ] || ln -s "$PWD/$s" "$root/om4-bench/$(basename "$s")"; done
  # signed requests: every reader signs with this key
  server_args=(--server-binary target/bench-s3/release/om4-bench-s3 --bucket-root "$root" --server om4-bench-s3
               --key om4:om4-bench-secret)
fi
echo "load before: $(cat /proc/loadavg)"
"$work/venv/bin/python" benches/peers/s3_bench.py --om4 "$om4" "${stores[@]}" --batch-store "${stores[1]}" \
  "${server_args[@]}" --latencies "$latencies" --levels "$levels" --workdir "$work/work" --out "$out" --plot "$plot" --tables "$tables" "${extra[@]}"
echo "load after: $(cat /proc/loadavg)"
