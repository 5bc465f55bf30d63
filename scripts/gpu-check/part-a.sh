# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# a + d: staging and overlap; pinned loader batches through Burn.
if part 120 "$work/bin/pinned" --nocapture --test-threads 1 > "$log/pinned.txt" 2>&1; then
  row "a/d. pinned staging, overlap" PASS "$(grep -iE 'GB/s|overlap' "$log/pinned.txt" | tr '\n' ' ' | cut -c1-200)"
else fail "a/d. pinned staging, overlap" "$?" "see pinned.txt: $(tail -3 "$log/pinned.txt" | tr '\n' ' ')"; fi
if part 120 "$work/bin/cuda" --nocapture --test-threads 1 > "$log/cuda-test.txt" 2>&1; then
  row "a. pinned loader batches via Burn" PASS "equal to pageable ones bit for bit"
else fail "a. pinned loader batches via Burn" "$?" "$(tail -3 "$log/cuda-test.txt" | tr '\n' ' ')"; fi
# b: device preparation equals the host reference.
if part 300 "$work/bin/om4-train" prepare --device "$dev" > "$log/prepare.txt" 2>&1; then
  row "b. prepare on $dev = host" PASS "$(tail -1 "$log/prepare.txt")"
else fail "b. prepare on $dev = host" "$?" "$(tail -2 "$log/prepare.txt" | tr '\n' ' ')"; fi
