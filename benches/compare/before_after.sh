#!/usr/bin/env bash
# Two om4 binaries side by side on the same stores: `om4 bench read` (GB/s, median of its repeats)
# and `om4 bench batch` (ms per batch, median), in interleaved rounds whose order alternates.
#
#   benches/compare/before_after.sh BEFORE_BIN AFTER_BIN ROUNDS STORE...
set -euo pipefail
before=$1 after=$2 rounds=$3; shift 3
for store in "$@"; do
  for r in $(seq 1 "$rounds"); do
    order=("$before" "$after"); (( r % 2 == 0 )) && order=("$after" "$before")
    for bin in "${order[@]}"; do
      name=$([[ $bin == "$before" ]] && echo before || echo after)
      read=$("$bin" bench read "$store" --windows 12 --repeats 3 --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["gb_per_s_median"], 2))')
      batch=$("$bin" bench batch "$store" --batches 4 --repeats 3 --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["ms_per_batch_median"], 1))')
      echo "$(basename "$(dirname "$store")") round $r $name read_gb_s $read batch_ms $batch"
    done
  done
done
