# Sourced by scripts/gpu-check/run.sh inside run(): its variables (work, carry, log, dev, model,
# grid, python, torch_device, torch_grid, cpu) and the table helpers of limits.sh are in scope.
# c: every operation of the step and whole steps against flex (TF32 convolutions and matmuls on
# CUDA: bound 1e-2), then the demo on cuda and cpu (v2 at 1° comes after e and g).
if part 300 "$work/bin/om4-train" ops --device "$dev" --tolerance "${OM4_GPU_CHECK_OPS_TOL:-1e-2}" > "$log/ops.txt" 2>&1; then
  row "c. ops on $dev vs flex" PASS "$(grep -c '| yes |' "$log/ops.txt") rows within the bound (ops.txt)"
else fail "c. ops on $dev vs flex" "$?" "$(grep '| NO |' "$log/ops.txt" | head -2 | tr '\n' ' ')"; fi
part 300 "$work/bin/om4-train" train --device "$dev" --epochs 2 > "$log/demo-cuda.txt" 2>&1
part 300 "$work/bin/om4-train" train --device cpu --epochs 2 > "$log/demo-cpu.txt" 2>&1
gpu=$(losses "$log/demo-cuda.txt"); cpu=$(losses "$log/demo-cpu.txt")
if [ -n "$gpu" ] && close "$gpu" "$cpu"; then
  row "c. demo $dev vs cpu (2 epochs)" PASS "train loss $dev $gpu/ cpu $cpu(1e-3 rel.)"
else fail "c. demo $dev vs cpu (2 epochs)" "$?" "$dev [$gpu] cpu [$cpu]: $(tail -2 "$log/demo-cuda.txt" | tr '\n' ' ')"; fi
