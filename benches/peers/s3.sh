#!/usr/bin/env bash
# om4 against TensorStore's S3 driver and zarr-python (obstore) on one local S3 server, with
# 0, 10 and 50 ms added to every request (benches/peers/latency_proxy.rs): raw windows and
# Samudra batches on synthetic 1° stores (80 channels, 24 steps).
#   benches/peers/s3.sh            full run (writes docs/peers-s3.json, docs/peers-s3.png and the
#                                  tables between the peers-s3 markers of docs/benchmarks.md)
#   benches/peers/s3.sh --smoke    tiny stores, one latency: checks the harness end to end
# The server: s3s-fs (crates.io, a Rust S3 server over a local folder; installed into
# target/s3s on first use) unless OM4_S3_BENCH_SERVER=moto, then scripts/s3-server.sh's moto.
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
  synth=(--ny 18 --nx 36 --times 12 --levels 2); latencies=10; levels=2; extra=(--windows 1 --rounds 1 --batch-sizes 1 --batches 1 --steps 2)
  out="$work/smoke.json"; tables="$work/smoke.md"; plot="$work/smoke.png"; stores_dir="$work/smoke-stores"
  printf '<!-- peers-s3:begin -->\n<!-- peers-s3:end -->\n' > "$tables"
else
  synth=(--grid 1deg --times 24); latencies=0,10,50; levels=19; extra=()
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

server_pid=""; server_args=()
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT
if [ "${OM4_S3_BENCH_SERVER:-s3s}" = moto ]; then
  eval "$(scripts/s3-server.sh)"
  endpoint=$OM4_S3_ENDPOINT
  server_args=(--server moto)
else
  if [ ! -x target/s3s/bin/s3s-fs ]; then
    # 0.14.1: the newest s3s-fs that builds with this toolchain (0.17 needs rustc 1.96)
    cargo install --locked --root target/s3s s3s-fs@0.14.1 --features binary
  fi
  rm -rf "$work/s3s-root"; mkdir -p "$work/s3s-root/om4-bench"  # the bucket is a folder
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # s3s-fs serves signed requests only: every reader signs with this key
  target/s3s/bin/s3s-fs --host 127.0.0.1 --port "$port" --access-key om4 --secret-key om4-bench-secret "$work/s3s-root" \
    >"$work/s3s.log" 2>&1 &
  server_args=(--server s3s-fs --key om4:om4-bench-secret)
  server_pid=$!
  endpoint=http://127.0.0.1:$port
  for _ in $(seq 1 50); do curl -s -o /dev/null "$endpoint" && break; sleep 0.1; done
fi
echo "S3 server at $endpoint; load before: $(cat /proc/loadavg)"
"$work/venv/bin/python" benches/peers/s3_bench.py --om4 "$om4" --endpoint "$endpoint" "${stores[@]}" --batch-store "${stores[1]}" \
  "${server_args[@]}" --latencies "$latencies" --levels "$levels" --workdir "$work/work" --out "$out" --plot "$plot" --tables "$tables" "${extra[@]}"
echo "load after: $(cat /proc/loadavg)"
