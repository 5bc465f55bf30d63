# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# g: forward parity with upstream at 1° on the device (the instance-norm presets and v2).
part 180 python3 tests/data/upstream/check_forward_1deg.py --upstream-src "$work/src/src" \
  --forward-bin "$work/bin/om4-train forward --device $dev" --torch-device "$torch_device" \
  --case independent --presets "${OM4_GPU_CHECK_FORWARD:-tiny,v2_highres,v2}" --work "$work/forward" \
  > "$log/forward.txt" 2>&1
status=$?
errors=$(grep -oE '^[a-z0-9_]+ \(independent\): max[^[]*' "$log/forward.txt" | sed 's/max|om4 - ref| \/ max|ref| = //' | tr '\n' ';')
if [ "$status" = 0 ]; then row "g. forward parity 1° on $dev" PASS "$errors"
else fail "g. forward parity 1° on $dev" "$status" "exit $status: $errors $(tail -2 "$log/forward.txt" | tr '\n' ' ')"; fi
