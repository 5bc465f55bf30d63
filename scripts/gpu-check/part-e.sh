# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# e: om4's optimizer step against upstream PyTorch's on the same device, side by side in
# interleaved rounds (benches/step/step.py: both resident, warmed up, then alternating).
cases=()
for c in ${OM4_GPU_CHECK_STEP_CASES:-1 4 4:bf16}; do cases+=(--case "$model:$torch_grid:$c"); done
out=$(part 300 python3 benches/step/step.py --upstream-src "$work/src/src" --python "$python" \
  --om4 "$work/bin/om4-train" --device "$torch_device" --rounds "${OM4_GPU_CHECK_ROUNDS:-5}" \
  --json "$log/step-bench.json" "${cases[@]}" 2> "$log/step-bench.txt")
status=$?
if [ "$status" = 0 ]; then
  while IFS= read -r line; do
    case "$line" in "| $model "*) row "e. step om4 vs pytorch" INFO "${line#| }";; esac
  done <<< "$out"
else fail "e. step om4 vs pytorch" "$status" "exit $status: $(tail -2 "$log/step-bench.txt" | tr '\n' ' ')"; fi
# Where om4's step spends its time on the device: each phase and operation alone, synchronized.
if [ "${OM4_GPU_CHECK_PROFILE:-1}" = 0 ]; then
  row "e. step profile ($model, batch 4)" SKIP "OM4_GPU_CHECK_PROFILE=0"
elif part 120 "$work/bin/om4-train" step --profile --device "$dev" --preset "$model" --grid "$torch_grid" \
  --batch 4 --repeats 3 > "$log/profile.txt" 2>&1; then
  row "e. step profile ($model, batch 4)" INFO "$(grep -ciE 'ms|s$' "$log/profile.txt") lines in profile.txt"
else fail "e. step profile ($model, batch 4)" "$?" "$(tail -2 "$log/profile.txt" | tr '\n' ' ')"; fi
