#!/usr/bin/env bash
# om4 against the Python Zarr readers on synthetic OM4 stores (80 channels at 1°): raw windows, open +
# first window, and a Samudra batch on the host.
#   benches/peers/run.sh            full run (about 10 minutes on 2 cores; writes docs/peers.json, docs/peers.png
#                                   and the tables in docs/benchmarks.md)
#   benches/peers/run.sh --smoke    a few seconds on tiny stores; checks the harness end to end
# Creates its own virtual environment (target/peers/venv) from requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=target/peers
mkdir -p "$work"
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q -r benches/peers/requirements.txt
fi
cargo build --release --locked --bin om4
om4=target/release/om4
mode="${1:-}"
if [ "$mode" = "--smoke" ]; then
  args=(--ny 18 --nx 36 --times 12 --levels 2); rounds=1; windows=2; out="$work/smoke.json"; plot=(--plot "$work/smoke.png" --tables "$work/smoke.md"); sizes=1; stores_dir="$work/smoke-stores"
  printf '<!-- peers:begin -->\n<!-- peers:end -->\n' > "$work/smoke.md"
else
  args=(--grid 1deg --times 60); rounds=3; windows=12; out=docs/peers.json; plot=(--plot docs/peers.png --tables docs/benchmarks.md); sizes=1,4; stores_dir="$work/stores"
fi
stores=()
for variant in "v2 blosc-lz4" "v2 none" "v2 zstd" "v3 blosc-lz4 --shard 6"; do
  set -- $variant
  name="$stores_dir/$1-$2${3:+-sharded}"
  if [ ! -f "$name/.done-${args[*]// /_}" ]; then
    rm -rf "$name"
    "$om4" synth "$name" "${args[@]}" --format "$1" --codec "$2" "${@:3}" >/dev/null
    touch "$name/.done-${args[*]// /_}"
  fi
  stores+=(--store "$name/OM4.zarr")
done
echo "load before: $(cat /proc/loadavg)"
levels=19; [ "$mode" = "--smoke" ] && levels=2
"$work/venv/bin/python" benches/peers/bench.py --om4 "$om4" "${stores[@]}" --rounds "$rounds" --windows "$windows" \
  --workdir "$work" --out "$out" --batch-store "${stores[1]}" --batch-store "${stores[3]}" --levels "$levels" --batch-sizes "$sizes" "${plot[@]}"
echo "load after: $(cat /proc/loadavg)"
