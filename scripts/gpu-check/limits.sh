# The lent device machine's limits, in one place, and the table a run prints.
#
# - A run's command has 10 minutes; `run` keeps to OM4_GPU_CHECK_BUDGET seconds (default 480),
#   each part under its own timeout cut to what is left (a part with no time left is a SKIP row).
# - A run carries the working tree and one folder, 64 MiB in all (`pack` checks a carry).

carry_limit_bytes=$((63 << 20))

# Copies the named parts of target/gpu-build into a carry folder; fails if it and the working tree
# exceed a device run's 64 MiB.
pack() {
  local to=$1 size tree
  shift
  mkdir -p "$to/bin"
  for item in "$@"; do cp -r "target/gpu-build/$item" "$to/$item"; done
  size=$(du -sb "$to" | cut -f1)
  tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  echo "$to: $((size >> 20)) MiB (+ working tree $((tree >> 20)) MiB)"
  if [ $((size + tree)) -gt "$carry_limit_bytes" ]; then
    echo "$to ($size bytes) and the working tree ($tree) exceed a device run's 64 MiB"; exit 1
  fi
}

# One table row per check: name, PASS/FAIL/INFO, what was measured.
rows=()
failed=0
row() {
  rows+=("$(printf '| %-34s | %-4s | %s |' "$1" "$2" "$3")")
  if [ "$2" = FAIL ]; then failed=1; fi
}
# A FAIL row, or SKIP when the part did not run for lack of time (status 125).
fail() {
  if [ "$2" = 125 ]; then row "$1" SKIP "no time left in the run's budget"; else row "$1" FAIL "$3"; fi
}

# Seconds for a part: its own limit, or what is left of the run's budget (OM4_GPU_CHECK_BUDGET,
# default 480 s, inside the device's 10-minute command limit); 0 when too little is left.
budget() {
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# Runs a part under `budget`; a part with no time left is a SKIP row instead.
part() {
  local limit
  limit=$(budget "$1")
  shift
  if [ "$limit" = 0 ]; then return 125; fi
  timeout "$limit" "$@"
}

# xz archives unpacked by Python's lzma where the machine has no xz.
unxz_to() { xz -dc "$1" > "$2" 2>/dev/null || python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
untar() { [ -f "$1" ] && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }

